// Package contract reads the turnstream wire contract from schemas/bundled/
// with hamba/avro alone.
//
// Each bundled/<version>/<topic>.avsc is one self-contained schema. A frame is
// Avro single-object encoding: C3 01, the 8 fingerprint bytes, the Avro body.
// hamba/avro computes a different fingerprint than the one in the frame (its
// canonical form keeps logicalType, and it returns the CRC big-endian), so the
// writer schema is found in the published table bundled/fingerprints.json,
// keyed by the hex of the 8 bytes exactly as they appear in the frame.
package contract

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hamba/avro/v2"
)

// TopicSchema is one topic schema of one version.
type TopicSchema struct {
	Topic       string
	Version     string
	Fingerprint string
	Schema      avro.Schema
}

// Contract maps fingerprints to writer schemas and names each topic's
// current (writer) schema.
type Contract struct {
	byFingerprint map[string]*TopicSchema
	writers       map[string]*TopicSchema
}

type table struct {
	Writers map[string]struct {
		Fingerprint string `json:"fingerprint"`
	} `json:"writers"`
	Fingerprints map[string]struct {
		Topic   string `json:"topic"`
		Version string `json:"version"`
		File    string `json:"file"`
	} `json:"fingerprints"`
}

// Load reads schemas/bundled/fingerprints.json and every schema it names.
func Load(schemasDir string) (*Contract, error) {
	dir := filepath.Join(schemasDir, "bundled")
	raw, err := os.ReadFile(filepath.Join(dir, "fingerprints.json"))
	if err != nil {
		return nil, err
	}
	var t table
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("fingerprints.json: %w", err)
	}
	c := &Contract{byFingerprint: map[string]*TopicSchema{}, writers: map[string]*TopicSchema{}}
	for fp, entry := range t.Fingerprints {
		text, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(entry.File)))
		if err != nil {
			return nil, err
		}
		// A cache per file: every version defines the same names, differently.
		schema, err := avro.ParseBytesWithCache(text, "", &avro.SchemaCache{})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", entry.File, err)
		}
		c.byFingerprint[fp] = &TopicSchema{entry.Topic, entry.Version, fp, schema}
	}
	for topic, w := range t.Writers {
		ts, ok := c.byFingerprint[w.Fingerprint]
		if !ok {
			return nil, fmt.Errorf("writer fingerprint %s of %s is not in the table", w.Fingerprint, topic)
		}
		c.writers[topic] = ts
	}
	return c, nil
}

// WriterOf finds the schema a frame was written with, by its fingerprint.
func (c *Contract) WriterOf(frame []byte) (*TopicSchema, error) {
	if len(frame) < 10 || frame[0] != 0xC3 || frame[1] != 0x01 {
		return nil, errors.New("not an Avro single-object frame")
	}
	fp := hex.EncodeToString(frame[2:10])
	ts, ok := c.byFingerprint[fp]
	if !ok {
		return nil, fmt.Errorf("unknown schema fingerprint %s", fp)
	}
	return ts, nil
}

// Decode decodes a frame with its writer schema into generic values: records
// are map[string]any, and a union value is a one-entry map from the branch's
// full name to the value.
func (c *Contract) Decode(frame []byte) (*TopicSchema, map[string]any, error) {
	ts, err := c.WriterOf(frame)
	if err != nil {
		return nil, nil, err
	}
	var value map[string]any
	if err := avro.Unmarshal(ts.Schema, frame[10:], &value); err != nil {
		return nil, nil, fmt.Errorf("%s body: %w", ts.Topic, err)
	}
	return ts, value, nil
}

// Encode writes value with the current schema of topic, as a frame.
func (c *Contract) Encode(topic string, value any) ([]byte, string, error) {
	ts, ok := c.writers[topic]
	if !ok {
		return nil, "", fmt.Errorf("no writer schema for %s", topic)
	}
	body, err := avro.Marshal(ts.Schema, value)
	if err != nil {
		return nil, "", err
	}
	fp, _ := hex.DecodeString(ts.Fingerprint)
	frame := append([]byte{0xC3, 0x01}, fp...)
	return append(frame, body...), ts.Fingerprint, nil
}

// unwrap returns the value of a union branch ({"name": value}), or v itself.
func unwrap(v any) any {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for _, inner := range m {
			return inner
		}
	}
	return v
}

func branchName(v any) string {
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for name := range m {
			return name
		}
	}
	return ""
}

func str(v any) *string {
	v = unwrap(v)
	if v == nil {
		return nil
	}
	s := fmt.Sprint(v)
	return &s
}

func short(full string) string {
	for i := len(full) - 1; i >= 0; i-- {
		if full[i] == '.' {
			return full[i+1:]
		}
	}
	return full
}

// TypeOf is the turnstream type of a decoded value: its payload's branch
// name, or LoopState.
func TypeOf(value map[string]any) string {
	if payload, ok := value["payload"]; ok {
		return short(branchName(payload))
	}
	return "LoopState"
}

// IDOf is the event id, the command id, or a loop state's loop id.
func IDOf(value map[string]any) *string {
	if header, ok := value["header"].(map[string]any); ok {
		return str(header["event_id"])
	}
	if id, ok := value["command_id"]; ok {
		return str(id)
	}
	return str(value["loop_id"])
}

// LoopOf is the loop id a value belongs to (its topic's record key).
func LoopOf(value map[string]any) *string {
	if header, ok := value["header"].(map[string]any); ok {
		return str(header["loop_id"])
	}
	return str(value["loop_id"])
}

// IsCanonicalUUID reports whether s is a UUID in canonical lowercase text
// (36 characters, dashes at 8, 13, 18 and 23): the form of every key and id.
func IsCanonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, ch := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if ch != '-' {
				return false
			}
		case !('0' <= ch && ch <= '9' || 'a' <= ch && ch <= 'f'):
			return false
		}
	}
	return true
}

// NewUUID returns a random (version 4) UUID in canonical text.
func NewUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
