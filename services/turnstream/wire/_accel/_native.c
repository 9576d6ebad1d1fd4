/* The codec's native fast path: one interpreter of encode and decode plans.
 *
 * turnstream.wire._accel.native_plan compiles an event schema together with the
 * pydantic models into plans (nested tuples, one opcode first); this module
 * walks them: write(plan, event, limit) -> frame bytes, read(plan, data) ->
 * event.
 * It is the same mapping as the generated Python fast path
 * (_event_writer/_event_reader), only without the interpreter in between.
 *
 * It accepts less than the Python paths, never more: any value or byte it
 * does not fully expect raises Miss inside, write and read return None, and
 * the codec then runs the Python fast path and, behind it, the generic path,
 * which stays the authority for every error. Everything ambiguous (a
 * subclass, a str subclass, a datetime in a zone other than UTC's singleton,
 * a list where a tuple is expected...) is a miss here rather than a second
 * copy of a rule.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#ifdef Py_T_OBJECT_EX /* 3.12+: the member types are public API */
#define MEMBER_OBJECT Py_T_OBJECT_EX
#else
#include <structmember.h>
#define MEMBER_OBJECT T_OBJECT_EX
#endif
#include <stdint.h>
#include <string.h>

/* Encode opcodes (turnstream.wire._accel.native_plan mirrors them). */
enum {
    W_CONST = 0, W_NULL, W_BOOL, W_LONG, W_INT, W_STRING, W_BYTES, W_UUID,
    W_TIMESTAMP, W_ENUM, W_ARRAY, W_OPTIONAL, W_UNION, W_RECORD, W_CHECK
};
/* Decode opcodes. */
enum {
    R_NULL = 0, R_BOOL, R_LONG, R_STRING, R_BYTES, R_UUID, R_OPT_UUID,
    R_TIMESTAMP, R_ENUM, R_ARRAY, R_UNION, R_RECORD, R_MISS
};
/* Record flags. */
enum { F_GIVEN_HEADER = 1, F_HEADER_CACHE = 2 };

#ifndef TURNSTREAM_NATIVE_SOURCE /* set by hatch_build.py: this file's digest */
#define TURNSTREAM_NATIVE_SOURCE "unknown"
#endif

#define MAX_FIELDS 64
#define CACHE_LIMIT 8192
#define HEADER_LENGTHS 4

static PyObject *Miss;          /* the exception that hands over to Python */
static PyObject *UuidType;      /* uuid.UUID */
static PyObject *SafeUnknown;   /* uuid.SafeUUID.unknown */
static PyObject *UuidAt;        /* the Python parser of a UUID not cached */
static PyObject *SetFieldsSet, *SetExtra, *SetPrivate; /* slot descriptors */
static PyObject *EmptyTuple, *StrHeader;
static Py_ssize_t UuidIntOffset, UuidSafeOffset; /* a UUID's slots */

/* A plan's small non-negative ints (opcodes, flags, indexes), read without
 * a call: they are built by native_plan and always fit one digit. */
static inline Py_ssize_t
small_int(PyObject *o)
{
#if PY_VERSION_HEX >= 0x030C0000
    return (Py_ssize_t)_PyLong_CompactValue((PyLongObject *)o);
#else
    return Py_SIZE(o) == 0 ? 0 : (Py_ssize_t)((PyLongObject *)o)->ob_digit[0];
#endif
}

static inline Py_ssize_t
op_of(PyObject *node)
{
    return small_int(PyTuple_GET_ITEM(node, 0));
}

static int
miss(void)
{
    PyErr_SetNone(Miss);
    return -1;
}

/* ------------------------------------------------------------------ out */

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
    char stack[2048];
} Out;

static int
out_grow(Out *o, Py_ssize_t need)
{
    Py_ssize_t cap = o->cap * 2;
    while (cap < o->len + need)
        cap *= 2;
    char *buf;
    if (o->buf == o->stack) {
        buf = PyMem_Malloc(cap);
        if (buf)
            memcpy(buf, o->stack, o->len);
    } else {
        buf = PyMem_Realloc(o->buf, cap);
    }
    if (!buf) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = buf;
    o->cap = cap;
    return 0;
}

static inline int
out_reserve(Out *o, Py_ssize_t need)
{
    return (o->len + need <= o->cap) ? 0 : out_grow(o, need);
}

static inline int
out_put(Out *o, const char *data, Py_ssize_t n)
{
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->buf + o->len, data, n);
    o->len += n;
    return 0;
}

static inline int
out_bytes(Out *o, PyObject *b)
{
    return out_put(o, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
}

static inline int
out_long(Out *o, int64_t n)
{
    if (out_reserve(o, 10) < 0)
        return -1;
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    unsigned char *p = (unsigned char *)o->buf + o->len;
    while (z >= 0x80) {
        *p++ = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    o->len = (char *)p - o->buf;
    return 0;
}

/* Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm). */
static int64_t
days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void
civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static const char HEX[] = "0123456789abcdef";

/* The UUID's 128 bits, big-endian; -1 (Miss) for anything but a UUID. */
static int
uuid_bytes(PyObject *v, unsigned char raw[16])
{
    if ((PyObject *)Py_TYPE(v) != UuidType)
        return miss();
    PyObject *i = *(PyObject **)((char *)v + UuidIntOffset);
    if (!i || !PyLong_CheckExact(i))
        return miss();
#if PY_VERSION_HEX >= 0x030D0000
    int rc = _PyLong_AsByteArray((PyLongObject *)i, raw, 16, 0, 0, 1);
#else
    int rc = _PyLong_AsByteArray((PyLongObject *)i, raw, 16, 0, 0);
#endif
    if (rc < 0) {
        PyErr_Clear();
        return miss();
    }
    return 0;
}

static int
w_uuid(Out *o, PyObject *v)
{
    unsigned char raw[16];
    if (uuid_bytes(v, raw) < 0)
        return -1;
    if (out_reserve(o, 37) < 0)
        return -1;
    char *p = o->buf + o->len;
    *p++ = 72; /* zigzag(36) */
    for (int k = 0; k < 16; k++) {
        if (k == 4 || k == 6 || k == 8 || k == 10)
            *p++ = '-';
        *p++ = HEX[raw[k] >> 4];
        *p++ = HEX[raw[k] & 15];
    }
    o->len += 37;
    return 0;
}

static int
w_timestamp(Out *o, PyObject *v)
{
    if (!PyDateTime_CheckExact(v) ||
        PyDateTime_DATE_GET_TZINFO(v) != PyDateTime_TimeZone_UTC)
        return miss();
    int64_t days = days_from_civil(PyDateTime_GET_YEAR(v), PyDateTime_GET_MONTH(v),
                                   PyDateTime_GET_DAY(v));
    int64_t secs = days * 86400 + PyDateTime_DATE_GET_HOUR(v) * 3600 +
                   PyDateTime_DATE_GET_MINUTE(v) * 60 + PyDateTime_DATE_GET_SECOND(v);
    return out_long(o, secs * 1000000 + PyDateTime_DATE_GET_MICROSECOND(v));
}

/* Whether an (optional) id is set as validate_event means it: a UUID other
 * than the nil one. -1 (Miss) for any other value. */
static int
id_is_set(PyObject *v)
{
    if (v == Py_None)
        return 0;
    if ((PyObject *)Py_TYPE(v) != UuidType)
        return miss();
    PyObject *i = *(PyObject **)((char *)v + UuidIntOffset);
    if (!i || !PyLong_CheckExact(i))
        return miss();
    return PyObject_IsTrue(i);
}

/* The event's ids against its coordinate profile: rules are
 * ((in_header, key, must_be_set), ...). A broken rule is a miss: the Python
 * path raises the typed error. Attributes are read as attributes, so a
 * decoded instance's __dict__ is not materialized for this. */
static int
check_ids(PyObject *event, PyObject *rules)
{
    PyObject *header = NULL;
    int rc = 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(rules) && rc == 0; k++) {
        PyObject *rule = PyTuple_GET_ITEM(rules, k);
        PyObject *where = event;
        if (PyTuple_GET_ITEM(rule, 0) == Py_True) {
            if (!header && !(header = PyObject_GenericGetAttr(event, StrHeader))) {
                rc = -1;
                break;
            }
            where = header;
        }
        PyObject *v = PyObject_GenericGetAttr(where, PyTuple_GET_ITEM(rule, 1));
        if (!v) {
            rc = -1;
            break;
        }
        int set = id_is_set(v);
        Py_DECREF(v);
        if (set < 0)
            rc = -1;
        else if (set != (PyTuple_GET_ITEM(rule, 2) == Py_True))
            rc = miss();
    }
    Py_XDECREF(header);
    return rc;
}

static int w_value(Out *o, PyObject *node, PyObject *v);

static int
w_record(Out *o, PyObject *node, PyObject *v)
{
    if ((PyObject *)Py_TYPE(v) != PyTuple_GET_ITEM(node, 1))
        return miss();
    PyObject *fields = PyTuple_GET_ITEM(node, 2);
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    PyObject *dict = NULL;
    int rc = 0;
    for (Py_ssize_t k = 0; k < n && rc == 0; k++) {
        PyObject *field = PyTuple_GET_ITEM(fields, k);
        PyObject *key = PyTuple_GET_ITEM(field, 0);
        PyObject *sub = PyTuple_GET_ITEM(field, 1);
        if (key == Py_None) {
            rc = w_value(o, sub, v);
            continue;
        }
        if (!dict) {
            dict = PyObject_GenericGetDict(v, NULL);
            if (!dict)
                return -1;
        }
        PyObject *item = PyDict_GetItemWithError(dict, key);
        if (!item) {
            rc = PyErr_Occurred() ? -1 : miss();
            break;
        }
        rc = w_value(o, sub, item);
    }
    Py_XDECREF(dict);
    return rc;
}

static int
w_value(Out *o, PyObject *node, PyObject *v)
{
    switch (op_of(node)) {
    case W_CONST:
        return out_bytes(o, PyTuple_GET_ITEM(node, 1));
    case W_NULL:
        return v == Py_None ? 0 : miss();
    case W_BOOL:
        if (v == Py_True || v == Py_False) {
            if (out_reserve(o, 1) < 0)
                return -1;
            o->buf[o->len++] = v == Py_True;
            return 0;
        }
        return miss();
    case W_LONG:
    case W_INT: {
        if (!PyLong_CheckExact(v) && !PyBool_Check(v))
            return miss();
        int overflow = 0;
        long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return miss();
        if (n == -1 && PyErr_Occurred())
            return -1;
        if (op_of(node) == W_INT && (n < INT32_MIN || n > INT32_MAX))
            return miss();
        return out_long(o, n);
    }
    case W_STRING: {
        if (!PyUnicode_CheckExact(v))
            return miss();
#if PY_VERSION_HEX < 0x030C0000
        /* Legacy (not yet ready) strings exist before 3.12 only. */
        if (PyUnicode_READY(v) < 0)
            return -1;
#endif
        if (PyUnicode_IS_ASCII(v)) {
            Py_ssize_t n = PyUnicode_GET_LENGTH(v);
            if (out_long(o, n) < 0)
                return -1;
            return out_put(o, (const char *)PyUnicode_DATA(v), n);
        }
        /* A copy, not the str's cached UTF-8: that would live as long as the
         * (possibly large) text does. */
        PyObject *b = PyUnicode_AsUTF8String(v);
        if (!b) {
            PyErr_Clear();
            return miss();
        }
        int rc = out_long(o, PyBytes_GET_SIZE(b));
        if (rc == 0)
            rc = out_bytes(o, b);
        Py_DECREF(b);
        return rc;
    }
    case W_BYTES:
        if (!PyBytes_CheckExact(v))
            return miss();
        if (out_long(o, PyBytes_GET_SIZE(v)) < 0)
            return -1;
        return out_bytes(o, v);
    case W_UUID:
        return w_uuid(o, v);
    case W_TIMESTAMP:
        return w_timestamp(o, v);
    case W_ENUM: {
        PyObject *cls = PyTuple_GET_ITEM(node, 2);
        if (cls != Py_None && (PyObject *)Py_TYPE(v) != cls)
            return miss();
        PyObject *code = PyDict_GetItemWithError(PyTuple_GET_ITEM(node, 1), v);
        if (!code) {
            if (PyErr_Occurred())
                PyErr_Clear();
            return miss();
        }
        return out_bytes(o, code);
    }
    case W_ARRAY: {
        /* Tuples only (what the models hold): nothing can change one while
         * it is written. */
        if (!PyTuple_CheckExact(v))
            return miss();
        PyObject *item = PyTuple_GET_ITEM(node, 1);
        Py_ssize_t n = PyTuple_GET_SIZE(v);
        if (n) {
            if (out_long(o, n) < 0)
                return -1;
            for (Py_ssize_t k = 0; k < n; k++)
                if (w_value(o, item, PyTuple_GET_ITEM(v, k)) < 0)
                    return -1;
        }
        return out_put(o, "\0", 1);
    }
    case W_OPTIONAL:
        if (v == Py_None)
            return out_bytes(o, PyTuple_GET_ITEM(node, 1));
        if (out_bytes(o, PyTuple_GET_ITEM(node, 2)) < 0)
            return -1;
        return w_value(o, PyTuple_GET_ITEM(node, 3), v);
    case W_UNION: {
        PyObject *entry = PyDict_GetItemWithError(PyTuple_GET_ITEM(node, 1),
                                                  (PyObject *)Py_TYPE(v));
        if (!entry)
            return PyErr_Occurred() ? -1 : miss();
        if (out_bytes(o, PyTuple_GET_ITEM(entry, 0)) < 0)
            return -1;
        return w_record(o, PyTuple_GET_ITEM(entry, 1), v);
    }
    case W_RECORD:
        return w_record(o, node, v);
    case W_CHECK:
        return check_ids(v, PyTuple_GET_ITEM(node, 1));
    default:
        PyErr_SetString(PyExc_SystemError, "unknown encode opcode");
        return -1;
    }
}

/* A decline: None for the caller, which then runs the Python paths. Only
 * Exception subclasses are declines; anything else (KeyboardInterrupt, a
 * SystemExit from a validator) goes on up. */
static PyObject *
declined(void)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyErr_Clear();
    Py_RETURN_NONE;
}

static PyObject *
native_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_Check(args[0]) || !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "write(plan, value, limit)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    Out o;
    o.buf = o.stack;
    o.len = 0;
    o.cap = sizeof(o.stack);
    PyObject *result = NULL;
    if (w_value(&o, args[0], args[1]) == 0) {
        /* Past the limit: the Python paths write it again and raise the
         * typed error. */
        if (o.len > limit)
            result = Py_NewRef(Py_None);
        else
            result = PyBytes_FromStringAndSize(o.buf, o.len);
    }
    if (o.buf != o.stack)
        PyMem_Free(o.buf);
    return result ? result : declined();
}

/* ------------------------------------------------------------------- in */

typedef struct {
    PyObject *data;
    const unsigned char *d;
    Py_ssize_t p, n;
} In;

/* The long at d[p]: at most ten bytes and 64 bits, as the Python reader. */
static int
r_long(In *in, int64_t *out)
{
    uint64_t z = 0;
    for (int k = 0; k < 10; k++) {
        if (in->p >= in->n)
            return miss();
        unsigned b = in->d[in->p++];
        if (k == 9 && b > 1)
            return miss();
        z |= (uint64_t)(b & 0x7F) << (7 * k);
        if (b < 0x80) {
            *out = (int64_t)((z >> 1) ^ (0 - (z & 1)));
            return 0;
        }
    }
    return miss();
}

static int
r_length(In *in, Py_ssize_t *out)
{
    int64_t n;
    if (r_long(in, &n) < 0)
        return -1;
    if (n < 0 || n > in->n - in->p)
        return miss();
    *out = (Py_ssize_t)n;
    return 0;
}

/* Decoded UUIDs by their canonical text, direct-mapped: the ids of a session
 * repeat in every event, and a hit costs one compare, no parse and no
 * allocation. Bounded by construction. */
#define UUID_SLOTS 4096
static struct {
    unsigned char text[36];
    PyObject *uuid;
} uuid_slots[UUID_SLOTS];

static inline size_t
uuid_slot(const unsigned char *text)
{
    uint64_t a, b, c, d;
    memcpy(&a, text, 8);
    memcpy(&b, text + 9, 8);
    memcpy(&c, text + 19, 8);
    memcpy(&d, text + 28, 8);
    uint64_t h = (a ^ (b * 0x9E3779B97F4A7C15ULL) ^ (c * 0xC2B2AE3D27D4EB4FULL) ^ d);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    return (size_t)((h ^ (h >> 32)) % UUID_SLOTS);
}

static int
hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The 36 characters of a canonical (lowercase) UUID text, or -1. */
static int
parse_uuid(const unsigned char *s, unsigned char raw[16])
{
    int k = 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return -1;
            continue;
        }
        int hi = hex_digit(s[i]), lo = hex_digit(s[i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        raw[k++] = (unsigned char)(hi << 4 | lo);
        i++;
    }
    return 0;
}

static PyObject *
new_uuid(const unsigned char raw[16])
{
    PyObject *i = _PyLong_FromByteArray(raw, 16, 0, 0);
    if (!i)
        return NULL;
    /* As UUID.__init__ leaves it: the int, and is_safe unknown. */
    PyObject *u = PyBaseObject_Type.tp_new((PyTypeObject *)UuidType, EmptyTuple, NULL);
    if (!u) {
        Py_DECREF(i);
        return NULL;
    }
    *(PyObject **)((char *)u + UuidIntOffset) = i;
    *(PyObject **)((char *)u + UuidSafeOffset) = Py_NewRef(SafeUnknown);
    return u;
}

static PyObject *
r_uuid(In *in, int optional)
{
    /* Canonical text (length 36, lowercase hex): parsed here. */
    Py_ssize_t at = in->p + (optional ? 1 : 0);
    if (in->n - at >= 37 && in->d[at] == 72 && (!optional || in->d[in->p] == 2)) {
        const unsigned char *text = in->d + at + 1;
        size_t slot = uuid_slot(text);
        if (uuid_slots[slot].uuid && memcmp(uuid_slots[slot].text, text, 36) == 0) {
            in->p = at + 37;
            return Py_NewRef(uuid_slots[slot].uuid);
        }
        unsigned char raw[16];
        if (parse_uuid(text, raw) == 0) {
            PyObject *u = new_uuid(raw);
            if (!u)
                return NULL;
            in->p = at + 37;
            Py_XSETREF(uuid_slots[slot].uuid, Py_NewRef(u));
            memcpy(uuid_slots[slot].text, text, 36);
            return u;
        }
    }
    /* Anything else: the Python parser, with its rules. */
    PyObject *pos = PyLong_FromSsize_t(in->p);
    if (!pos)
        return NULL;
    PyObject *pair = PyObject_CallFunctionObjArgs(UuidAt, in->data, pos,
                                                  optional ? Py_True : Py_False, NULL);
    Py_DECREF(pos);
    if (!pair)
        return NULL;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        Py_DECREF(pair);
        miss();
        return NULL;
    }
    Py_ssize_t p = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 1));
    if (p == -1 && PyErr_Occurred()) {
        Py_DECREF(pair);
        return NULL;
    }
    in->p = p;
    PyObject *value = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
    Py_DECREF(pair);
    return value;
}

static PyObject *
r_timestamp(In *in)
{
    int64_t v;
    if (r_long(in, &v) < 0)
        return NULL;
    /* As EPOCH + timedelta(microseconds=v): floor division, UTC's singleton. */
    int64_t days = v / 86400000000LL, rem = v % 86400000000LL;
    if (rem < 0) {
        rem += 86400000000LL;
        days -= 1;
    }
    int64_t y;
    unsigned m, d;
    civil_from_days(days, &y, &m, &d);
    if (y < 1 || y > 9999) {
        miss();
        return NULL;
    }
    int64_t secs = rem / 1000000;
    return PyDateTimeAPI->DateTime_FromDateAndTime(
        (int)y, (int)m, (int)d, (int)(secs / 3600), (int)(secs / 60 % 60),
        (int)(secs % 60), (int)(rem % 1000000), PyDateTime_TimeZone_UTC,
        PyDateTimeAPI->DateTimeType);
}

static PyObject *r_value(In *in, PyObject *node);
static PyObject *r_record(In *in, PyObject *node, PyObject *given);

static int
broken(PyObject *v, PyObject *bounds)
{
    Py_ssize_t n = PyTuple_GET_SIZE(bounds);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *rule = PyTuple_GET_ITEM(bounds, k);
        int r = PyObject_RichCompareBool(v, PyTuple_GET_ITEM(rule, 1),
                                         (int)PyLong_AsLong(PyTuple_GET_ITEM(rule, 0)));
        if (r != 0)
            return r < 0 ? -1 : miss();
    }
    return 0;
}

static PyObject *
header_cached(In *in, PyObject *cache)
{
    /* cache = (dict, lengths list, firsts set) */
    if (in->p >= in->n)
        return NULL;
    PyObject *first = PyLong_FromLong(in->d[in->p]);
    int seen = PySet_Contains(PyTuple_GET_ITEM(cache, 2), first);
    Py_DECREF(first);
    if (seen <= 0)
        return NULL;
    PyObject *lengths = PyTuple_GET_ITEM(cache, 1);
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(lengths); k++) {
        Py_ssize_t size = PyLong_AsSsize_t(PyList_GET_ITEM(lengths, k));
        if (size > in->n - in->p)
            continue;
        PyObject *key = PyBytes_FromStringAndSize((const char *)in->d + in->p, size);
        if (!key)
            return NULL;
        PyObject *hit = PyDict_GetItem(PyTuple_GET_ITEM(cache, 0), key);
        Py_DECREF(key);
        if (hit) {
            in->p += size;
            return Py_NewRef(hit);
        }
    }
    return NULL;
}

static int
header_store(In *in, PyObject *cache, Py_ssize_t start, PyObject *header)
{
    PyObject *dict = PyTuple_GET_ITEM(cache, 0);
    PyObject *lengths = PyTuple_GET_ITEM(cache, 1);
    if (PyDict_GET_SIZE(dict) >= CACHE_LIMIT)
        PyDict_Clear(dict);
    Py_ssize_t size = in->p - start;
    PyObject *key = PyBytes_FromStringAndSize((const char *)in->d + start, size);
    PyObject *first = PyLong_FromLong(in->d[start]);
    PyObject *length = PyLong_FromSsize_t(size);
    int rc = -1;
    if (key && first && length && PyDict_SetItem(dict, key, header) == 0 &&
        PySet_Add(PyTuple_GET_ITEM(cache, 2), first) == 0) {
        rc = 0;
        int known = PySequence_Contains(lengths, length);
        if (known < 0)
            rc = -1;
        else if (!known && PyList_GET_SIZE(lengths) < HEADER_LENGTHS)
            rc = PyList_Append(lengths, length);
    }
    Py_XDECREF(key);
    Py_XDECREF(first);
    Py_XDECREF(length);
    return rc;
}

/* node = (R_RECORD, cls, fields, order, fields_set, validators, flags,
 *         cache, event_id_index)
 * fields: ((node, bounds, optional), ...), read in schema order into values
 * (after the given header, with F_GIVEN_HEADER);
 * order: every model field in model order, (key, False, index into values)
 * or (key, True, constant default): set as attributes, so the instance keeps
 * CPython's shared-key inline values instead of a dict of its own. */
static PyObject *
r_record(In *in, PyObject *node, PyObject *given)
{
    Py_ssize_t flags = small_int(PyTuple_GET_ITEM(node, 6));
    PyObject *cache = PyTuple_GET_ITEM(node, 7);
    Py_ssize_t start = in->p;
    if (flags & F_HEADER_CACHE) {
        PyObject *hit = header_cached(in, cache);
        if (hit || PyErr_Occurred())
            return hit;
    }
    PyObject *fields = PyTuple_GET_ITEM(node, 2);
    Py_ssize_t nfields = PyTuple_GET_SIZE(fields);
    Py_ssize_t offset = (flags & F_GIVEN_HEADER) ? 1 : 0;
    PyObject *values[MAX_FIELDS + 1];
    Py_ssize_t have = 0;
    PyObject *result = NULL, *fields_set = NULL, *o = NULL;
    if (nfields + offset > MAX_FIELDS + 1) {
        PyErr_SetString(PyExc_SystemError, "record plan too wide");
        return NULL;
    }
    if (offset)
        values[have++] = Py_NewRef(given);
    for (Py_ssize_t k = 0; k < nfields; k++) {
        PyObject *field = PyTuple_GET_ITEM(fields, k);
        PyObject *v = r_value(in, PyTuple_GET_ITEM(field, 0));
        if (!v)
            goto done;
        values[have++] = v;
        PyObject *bounds = PyTuple_GET_ITEM(field, 1);
        if (PyTuple_GET_SIZE(bounds) &&
            !(v == Py_None && PyTuple_GET_ITEM(field, 2) == Py_True) &&
            broken(v, bounds) < 0)
            goto done;
    }
    fields_set = PySet_New(PyTuple_GET_ITEM(node, 4));
    if (!fields_set)
        goto done;
    PyTypeObject *cls = (PyTypeObject *)PyTuple_GET_ITEM(node, 1);
    o = PyBaseObject_Type.tp_new(cls, EmptyTuple, NULL);
    if (!o)
        goto done;
    PyObject *order = PyTuple_GET_ITEM(node, 3);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(order); k++) {
        PyObject *entry = PyTuple_GET_ITEM(order, k);
        /* (key, True, default) or (key, False, index into values) */
        PyObject *v = PyTuple_GET_ITEM(entry, 1) == Py_True
                          ? PyTuple_GET_ITEM(entry, 2)
                          : values[small_int(PyTuple_GET_ITEM(entry, 2))];
        if (PyObject_GenericSetAttr(o, PyTuple_GET_ITEM(entry, 0), v) < 0)
            goto done;
    }
    if (Py_TYPE(SetFieldsSet)->tp_descr_set(SetFieldsSet, o, fields_set) < 0 ||
        Py_TYPE(SetExtra)->tp_descr_set(SetExtra, o, Py_None) < 0 ||
        Py_TYPE(SetPrivate)->tp_descr_set(SetPrivate, o, Py_None) < 0)
        goto done;
    PyObject *validators = PyTuple_GET_ITEM(node, 5);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(validators); k++) {
        PyObject *r = PyObject_CallOneArg(PyTuple_GET_ITEM(validators, k), o);
        if (!r)
            goto done;
        Py_DECREF(r);
    }
    if (flags & F_HEADER_CACHE) {
        Py_ssize_t id_index = small_int(PyTuple_GET_ITEM(node, 8));
        if (values[id_index] == Py_None && header_store(in, cache, start, o) < 0)
            goto done;
    }
    result = Py_NewRef(o);
done:
    for (Py_ssize_t k = 0; k < have; k++)
        Py_DECREF(values[k]);
    Py_XDECREF(fields_set);
    Py_XDECREF(o);
    return result;
}

static PyObject *
r_value(In *in, PyObject *node)
{
    switch (op_of(node)) {
    case R_NULL:
        return Py_NewRef(Py_None);
    case R_BOOL:
        if (in->p >= in->n)
            break;
        switch (in->d[in->p++]) {
        case 0:
            return Py_NewRef(Py_False);
        case 1:
            return Py_NewRef(Py_True);
        }
        break;
    case R_LONG: {
        int64_t v;
        if (r_long(in, &v) < 0)
            return NULL;
        /* (R_LONG, lo, hi): the field's integer bounds, folded in. */
        if (PyTuple_GET_SIZE(node) == 2) {
            /* (R_LONG, bounds): lo and hi as two native int64 in bytes. */
            int64_t bounds[2];
            memcpy(bounds, PyBytes_AS_STRING(PyTuple_GET_ITEM(node, 1)), sizeof bounds);
            if (v < bounds[0] || v > bounds[1])
                break;
        }
        return PyLong_FromLongLong(v);
    }
    case R_STRING:
    case R_BYTES: {
        Py_ssize_t n;
        if (r_length(in, &n) < 0)
            return NULL;
        const char *s = (const char *)in->d + in->p;
        in->p += n;
        if (op_of(node) == R_BYTES)
            return PyBytes_FromStringAndSize(s, n);
        PyObject *v = PyUnicode_DecodeUTF8(s, n, "strict");
        if (!v) {
            PyErr_Clear();
            break;
        }
        PyObject *allowed = PyTuple_GET_ITEM(node, 1);
        if (allowed != Py_None) {
            int ok = PySet_Contains(allowed, v);
            if (ok != 1) {
                Py_DECREF(v);
                if (ok < 0)
                    return NULL;
                break;
            }
        }
        return v;
    }
    case R_UUID:
        return r_uuid(in, 0);
    case R_OPT_UUID:
        if (in->p >= in->n)
            break;
        if (in->d[in->p] == 0) {
            in->p++;
            return Py_NewRef(Py_None);
        }
        return r_uuid(in, 1);
    case R_TIMESTAMP:
        return r_timestamp(in);
    case R_ENUM: {
        if (in->p >= in->n)
            break;
        PyObject *key = PyLong_FromLong(in->d[in->p++]);
        PyObject *v = PyDict_GetItem(PyTuple_GET_ITEM(node, 1), key);
        Py_DECREF(key);
        if (!v)
            break;
        return Py_NewRef(v);
    }
    case R_ARRAY: {
        PyObject *item = PyTuple_GET_ITEM(node, 1);
        PyObject *items = NULL; /* a list only past the first block */
        PyObject *block = NULL;
        for (;;) {
            int64_t n;
            if (r_long(in, &n) < 0)
                goto fail;
            if (n == 0)
                break;
            /* Every item takes at least one byte: a count beyond the bytes
             * left is malformed, and never allocates. */
            if (n < 0 || n > in->n - in->p) {
                miss();
                goto fail;
            }
            if (block) {
                if (!items && !(items = PySequence_List(block)))
                    goto fail;
                Py_CLEAR(block);
            }
            block = PyTuple_New((Py_ssize_t)n);
            if (!block)
                goto fail;
            for (int64_t k = 0; k < n; k++) {
                PyObject *x = r_value(in, item);
                if (!x)
                    goto fail;
                PyTuple_SET_ITEM(block, k, x);
            }
            if (items) {
                PyObject *r = PySequence_InPlaceConcat(items, block);
                if (!r)
                    goto fail;
                Py_DECREF(r);
                Py_CLEAR(block);
            }
        }
        if (items) {
            PyObject *t = PyList_AsTuple(items);
            Py_DECREF(items);
            return t;
        }
        return block ? block : PyTuple_New(0);
    fail:
        Py_XDECREF(items);
        Py_XDECREF(block);
        return NULL;
    }
    case R_UNION: {
        if (in->p >= in->n)
            break;
        unsigned b = in->d[in->p++];
        PyObject *branches = PyTuple_GET_ITEM(node, 1);
        if (b & 1 || (Py_ssize_t)(b >> 1) >= PyTuple_GET_SIZE(branches))
            break;
        return r_value(in, PyTuple_GET_ITEM(branches, b >> 1));
    }
    case R_RECORD:
        return r_record(in, node, NULL);
    case R_MISS:
        break;
    default:
        PyErr_SetString(PyExc_SystemError, "unknown decode opcode");
        return NULL;
    }
    miss();
    return NULL;
}

/* plan = (frame prefix, header_node, payload nodes by branch index,
 *         id rules by branch index or None) */
static PyObject *
read_event(PyObject *plan, PyObject *data)
{
    if (!PyBytes_CheckExact(data)) {
        miss();
        return NULL;
    }
    In in;
    in.data = data;
    in.d = (const unsigned char *)PyBytes_AS_STRING(data);
    in.n = PyBytes_GET_SIZE(data);
    /* The frame's prefix (magic byte and schema fingerprint) first. */
    PyObject *prefix = PyTuple_GET_ITEM(plan, 0);
    in.p = PyBytes_GET_SIZE(prefix);
    if (in.p > in.n || memcmp(in.d, PyBytes_AS_STRING(prefix), in.p) != 0) {
        miss();
        return NULL;
    }
    PyObject *header = r_value(&in, PyTuple_GET_ITEM(plan, 1));
    if (!header)
        return NULL;
    PyObject *payloads = PyTuple_GET_ITEM(plan, 2);
    PyObject *event = NULL;
    if (in.p < in.n) {
        unsigned b = in.d[in.p++];
        PyObject *node = (b & 1 || (Py_ssize_t)(b >> 1) >= PyTuple_GET_SIZE(payloads))
                             ? Py_None
                             : PyTuple_GET_ITEM(payloads, b >> 1);
        if (node != Py_None) {
            event = r_record(&in, node, header);
            PyObject *rules = PyTuple_GET_ITEM(PyTuple_GET_ITEM(plan, 3), b >> 1);
            if (event && rules != Py_None && check_ids(event, rules) < 0)
                Py_CLEAR(event);
        } else {
            miss();
        }
    } else {
        miss();
    }
    Py_DECREF(header);
    if (event && in.p != in.n) {
        Py_CLEAR(event);
        miss();
    }
    return event;
}

static PyObject *
native_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "read(plan, data)");
        return NULL;
    }
    PyObject *event = read_event(args[0], args[1]);
    return event ? event : declined();
}

static int
slot_offset(PyObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *member = PyDict_GetItemString(((PyTypeObject *)type)->tp_dict, name);
    if (!member || !Py_IS_TYPE(member, &PyMemberDescr_Type) ||
        ((PyMemberDescrObject *)member)->d_member->type != MEMBER_OBJECT) {
        PyErr_Format(PyExc_TypeError, "UUID keeps its %s elsewhere", name);
        return -1;
    }
    *offset = ((PyMemberDescrObject *)member)->d_member->offset;
    return 0;
}

static PyObject *
native_configure(PyObject *self, PyObject *args)
{
    PyObject *miss_, *uuid_type, *safe_unknown, *uuid_at, *sf, *se, *sp;
    if (!PyArg_ParseTuple(args, "OO!OOOOO", &miss_, &PyType_Type, &uuid_type,
                          &safe_unknown, &uuid_at, &sf, &se, &sp))
        return NULL;
    PyObject *descrs[] = {sf, se, sp};
    for (int k = 0; k < 3; k++) {
        if (!Py_TYPE(descrs[k])->tp_descr_set) {
            PyErr_SetString(PyExc_TypeError, "a setter has no __set__");
            return NULL;
        }
    }
    Py_XSETREF(Miss, Py_NewRef(miss_));
    Py_XSETREF(UuidType, Py_NewRef(uuid_type));
    Py_XSETREF(SafeUnknown, Py_NewRef(safe_unknown));
    Py_XSETREF(UuidAt, Py_NewRef(uuid_at));
    Py_XSETREF(SetFieldsSet, Py_NewRef(sf));
    Py_XSETREF(SetExtra, Py_NewRef(se));
    Py_XSETREF(SetPrivate, Py_NewRef(sp));
    if (slot_offset(uuid_type, "int", &UuidIntOffset) < 0 ||
        slot_offset(uuid_type, "is_safe", &UuidSafeOffset) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"write", (PyCFunction)(void (*)(void))native_write, METH_FASTCALL,
     "write(plan, value, limit) -> bytes | None: the value encoded by the plan; "
     "None when it declines or the frame is longer than limit."},
    {"read", (PyCFunction)(void (*)(void))native_read, METH_FASTCALL,
     "read(plan, data) -> value | None: the frame decoded by the plan; None "
     "when it declines."},
    {"configure", native_configure, METH_VARARGS,
     "configure(Miss, UUID, SafeUUID.unknown, uuid_at, fields_set, "
     "extra, private descriptors): the Python objects the plans rely on."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "Native interpreter of the codec's fast-path plans (see native_plan).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    PyDateTime_IMPORT;
    if (!PyDateTimeAPI)
        return NULL;
    EmptyTuple = PyTuple_New(0);
    StrHeader = PyUnicode_InternFromString("header");
    if (!EmptyTuple || !StrHeader)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "SOURCE_DIGEST", TURNSTREAM_NATIVE_SOURCE) < 0)
        Py_CLEAR(m);
    return m;
}
