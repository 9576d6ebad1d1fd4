package dev.turnstream.interop;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;

/**
 * The turnstream wire contract, read from {@code schemas/bundled/} with Apache Avro alone.
 *
 * <p>Each {@code bundled/<version>/<topic>.avsc} is one self-contained schema. A frame is Avro
 * single-object encoding ({@code C3 01}, the 8-byte little-endian CRC-64-AVRO fingerprint of the
 * schema's Parsing Canonical Form, the body), which is exactly what Avro's {@link
 * BinaryMessageEncoder}/{@link BinaryMessageDecoder} write and read: Avro computes the same
 * fingerprint from the file, so no table is needed in Java (the fingerprint table in
 * {@code bundled/fingerprints.json} lists the same values for libraries that compute it
 * differently).
 */
final class Contract {
  static final String CURRENT = "current";

  /** One topic schema of one version. */
  record TopicSchema(String topic, String version, Schema schema, String fingerprint) {}

  private final Map<String, TopicSchema> byFingerprint = new HashMap<>();
  private final Map<String, Schema> current = new TreeMap<>();
  private final Map<String, BinaryMessageDecoder<GenericRecord>> decoders = new HashMap<>();
  private final List<TopicSchema> all = new ArrayList<>();

  Contract(Path schemasDir) throws IOException {
    Path bundled = schemasDir.resolve("bundled");
    // Current first, so it wins over a history set with the same fingerprint.
    List<Path> versions = new ArrayList<>(List.of(bundled.resolve(CURRENT)));
    try (DirectoryStream<Path> dirs = Files.newDirectoryStream(bundled, Files::isDirectory)) {
      for (Path dir : dirs) {
        if (!dir.getFileName().toString().equals(CURRENT)) {
          versions.add(dir);
        }
      }
    }
    for (Path dir : versions) {
      try (DirectoryStream<Path> files = Files.newDirectoryStream(dir, "*.avsc")) {
        for (Path file : files) {
          String topic = file.getFileName().toString().replaceFirst("\\.avsc$", "");
          // One parser per file: each file defines every type it uses.
          Schema schema = new Schema.Parser().parse(file.toFile());
          TopicSchema ts =
              new TopicSchema(topic, dir.getFileName().toString(), schema, fingerprint(schema));
          all.add(ts);
          byFingerprint.putIfAbsent(ts.fingerprint(), ts);
          if (ts.version().equals(CURRENT)) {
            current.put(topic, schema);
          }
        }
      }
    }
    for (Map.Entry<String, Schema> e : current.entrySet()) {
      // Reads every known writer schema of the topic, resolved into the current one.
      BinaryMessageDecoder<GenericRecord> decoder =
          new BinaryMessageDecoder<>(GenericData.get(), e.getValue());
      for (TopicSchema ts : all) {
        if (ts.topic().equals(e.getKey())) {
          decoder.addSchema(ts.schema());
        }
      }
      decoders.put(e.getKey(), decoder);
    }
  }

  /** The 8 fingerprint bytes as they appear in a frame, in hex. */
  static String fingerprint(Schema schema) {
    long fp = SchemaNormalization.parsingFingerprint64(schema);
    byte[] le = new byte[8];
    for (int i = 0; i < 8; i++) {
      le[i] = (byte) (fp >>> (8 * i));
    }
    return HexFormat.of().formatHex(le);
  }

  List<TopicSchema> schemas() {
    return all;
  }

  Schema current(String topic) {
    Schema schema = current.get(topic);
    if (schema == null) {
      throw new IllegalArgumentException("no schema for topic " + topic);
    }
    return schema;
  }

  /** The writer schema of a frame, found by the fingerprint in bytes 2..10. */
  TopicSchema writerOf(byte[] frame) {
    if (frame.length < 10 || frame[0] != (byte) 0xC3 || frame[1] != 0x01) {
      throw new IllegalArgumentException("not an Avro single-object frame");
    }
    String fp = HexFormat.of().formatHex(frame, 2, 10);
    TopicSchema ts = byFingerprint.get(fp);
    if (ts == null) {
      throw new IllegalArgumentException("unknown schema fingerprint " + fp);
    }
    return ts;
  }

  /** Decode a frame into the current schema of its topic. */
  GenericRecord decode(byte[] frame) throws IOException {
    return decoders.get(writerOf(frame).topic()).decode(frame);
  }

  /** Encode a record of the current schema of {@code topic} as a frame. */
  byte[] encode(String topic, GenericRecord value) throws IOException {
    return new BinaryMessageEncoder<GenericRecord>(GenericData.get(), current(topic))
        .encode(value)
        .array();
  }

  /** The turnstream type of a decoded value: its union branch name, or the record's name. */
  static String typeOf(GenericRecord value) {
    if (value.getSchema().getField("payload") != null) {
      return ((GenericRecord) value.get("payload")).getSchema().getName();
    }
    return value.getSchema().getName();
  }

  /** The value's id: the event id, the command id, or a loop state's loop id. */
  static String idOf(GenericRecord value) {
    if (value.getSchema().getField("header") != null) {
      return str(((GenericRecord) value.get("header")).get("event_id"));
    }
    if (value.getSchema().getField("command_id") != null) {
      return str(value.get("command_id"));
    }
    return str(value.get("loop_id"));
  }

  /** The loop id a value belongs to (the record key of its topic). */
  static String loopOf(GenericRecord value) {
    if (value.getSchema().getField("header") != null) {
      return str(((GenericRecord) value.get("header")).get("loop_id"));
    }
    return str(value.get("loop_id"));
  }

  static String str(Object value) {
    return value == null ? null : value.toString();
  }

  /** A JSON string literal (or null). */
  static String json(String value) {
    if (value == null) {
      return "null";
    }
    StringBuilder out = new StringBuilder("\"");
    for (char c : value.toCharArray()) {
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        default -> {
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    return out.append('"').toString();
  }
}
