package dev.turnstream.interop;

import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.apache.avro.Schema;
import org.apache.avro.SchemaParser;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A minimal turnstream reader: prints one JSON line per frame (type, id, fingerprint).
 *
 * <pre>
 * Reader SCHEMAS fingerprints                        print every bundled schema's fingerprint
 * Reader SCHEMAS fragments                           parse schemas/*.avsc in name order, print
 *                                                    each bundled current schema's fingerprint
 * Reader SCHEMAS files FRAME...                      decode frame files (e.g. golden fixtures)
 * Reader SCHEMAS kafka BOOTSTRAP TOPIC COUNT SECONDS read COUNT records of TOPIC from the start
 * </pre>
 */
public final class Reader {
  private Reader() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: Reader SCHEMAS (fingerprints | files FRAME... | kafka ...)");
      System.exit(2);
    }
    Contract contract = new Contract(Path.of(args[0]));
    switch (args[1]) {
      case "fingerprints" -> {
        for (Contract.TopicSchema ts : contract.schemas()) {
          System.out.printf(
              "{\"fingerprint\": %s, \"topic\": %s, \"version\": %s}%n",
              Contract.json(ts.fingerprint()),
              Contract.json(ts.topic()),
              Contract.json(ts.version()));
        }
      }
      case "fragments" -> fragments(contract, Path.of(args[0]));
      case "files" -> {
        for (int i = 2; i < args.length; i++) {
          byte[] frame = Files.readAllBytes(Path.of(args[i]));
          print(contract, frame, "\"source\": " + Contract.json(args[i]));
        }
      }
      case "kafka" -> kafka(contract, args[2], args[3], Integer.parseInt(args[4]), args[5]);
      default -> {
        System.err.println("unknown mode " + args[1]);
        System.exit(2);
      }
    }
  }

  /**
   * Avro's multi-file {@link SchemaParser} reads the fragments in file-name order (forward
   * references resolve at the end), and each topic's schema equals the bundled file's.
   */
  private static void fragments(Contract contract, Path schemasDir) throws Exception {
    List<Path> files = new ArrayList<>();
    try (DirectoryStream<Path> dir = Files.newDirectoryStream(schemasDir, "*.avsc")) {
      dir.forEach(files::add);
    }
    Collections.sort(files);
    SchemaParser parser = new SchemaParser();
    for (Path file : files) {
      parser.parse(file);
    }
    Map<String, Schema> named = new HashMap<>();
    for (Schema schema : parser.getParsedNamedSchemas()) {
      named.put(schema.getFullName(), schema);
    }
    for (Contract.TopicSchema ts : contract.schemas()) {
      if (!ts.version().equals(Contract.CURRENT)) {
        continue;
      }
      Schema fromFragments = named.get(ts.schema().getFullName());
      System.out.printf(
          "{\"topic\": %s, \"fragments\": %s, \"bundled\": %s, \"equal\": %b}%n",
          Contract.json(ts.topic()),
          Contract.json(Contract.fingerprint(fromFragments)),
          Contract.json(ts.fingerprint()),
          fromFragments.equals(ts.schema()));
    }
  }

  private static void print(Contract contract, byte[] frame, String extra) throws Exception {
    Contract.TopicSchema writer = contract.writerOf(frame);
    GenericRecord value = contract.decode(frame);
    System.out.printf(
        "{%s, \"topic\": %s, \"version\": %s, \"fingerprint\": %s, \"type\": %s, \"id\": %s}%n",
        extra,
        Contract.json(writer.topic()),
        Contract.json(writer.version()),
        Contract.json(writer.fingerprint()),
        Contract.json(Contract.typeOf(value)),
        Contract.json(Contract.idOf(value)));
  }

  private static void kafka(
      Contract contract, String bootstrap, String topic, int count, String seconds)
      throws Exception {
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
    // The journal is written in transactions: read only what was committed.
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    long deadline = System.nanoTime() + (long) (Double.parseDouble(seconds) * 1e9);
    int seen = 0;
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
      List<TopicPartition> parts = new ArrayList<>();
      for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(10))) {
        parts.add(new TopicPartition(topic, p.partition()));
      }
      consumer.assign(parts);
      consumer.seekToBeginning(parts);
      while (seen < count && System.nanoTime() < deadline) {
        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
          String key = new String(r.key(), StandardCharsets.UTF_8);
          // The key is the loop id as canonical lowercase UUID text.
          if (!UUID.fromString(key).toString().equals(key)) {
            throw new IllegalStateException("key is not a canonical UUID: " + key);
          }
          GenericRecord value = contract.decode(r.value());
          if (!key.equals(Contract.loopOf(value))) {
            throw new IllegalStateException("key " + key + " is not the value's loop id");
          }
          Header tsType = r.headers().lastHeader("ts-type");
          String extra =
              String.format(
                  "\"source\": %s, \"partition\": %d, \"offset\": %d, \"key\": %s, \"ts_type\": %s",
                  Contract.json(topic),
                  r.partition(),
                  r.offset(),
                  Contract.json(key),
                  Contract.json(
                      tsType == null ? null : new String(tsType.value(), StandardCharsets.UTF_8)));
          print(contract, r.value(), extra);
          seen++;
        }
      }
    }
    if (seen < count) {
      System.err.printf("read %d of %d records of %s before the timeout%n", seen, count, topic);
      System.exit(1);
    }
  }
}
