package dev.turnstream.interop;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A minimal turnstream writer: submits one user message to a loop.
 *
 * <pre>
 * Writer SCHEMAS BOOTSTRAP COMMANDS_TOPIC LOOP_ID SESSION_ID TEXT
 * </pre>
 *
 * <p>Prints {@code {"command_id": …, "partition": …, "offset": …}}. The record key is the loop
 * id's canonical text, so kafka-clients' default partitioner (murmur2 of the key) picks the
 * partition the loop actor owns.
 */
public final class Writer {
  private static final String TOPIC_SCHEMA = "turnstream.commands.v1";

  private Writer() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 6) {
      System.err.println("usage: Writer SCHEMAS BOOTSTRAP COMMANDS_TOPIC LOOP_ID SESSION_ID TEXT");
      System.exit(2);
    }
    Contract contract = new Contract(Path.of(args[0]));
    Schema envelope = contract.current(TOPIC_SCHEMA);
    String loopId = UUID.fromString(args[3]).toString();
    String sessionId = UUID.fromString(args[4]).toString();
    String commandId = UUID.randomUUID().toString();

    Schema submit = branch(envelope.getField("payload").schema(), "SubmitInput");
    Schema message = submit.getField("message").schema();
    Schema text = branch(message.getField("blocks").schema().getElementType(), "TextBlock");
    GenericRecord block = new GenericRecordBuilder(text).set("text", args[5]).build();
    GenericRecord value =
        new GenericRecordBuilder(envelope)
            .set("command_id", commandId)
            .set("session_id", sessionId)
            .set("loop_id", loopId)
            .set("created_at", ChronoUnit.MICROS.between(Instant.EPOCH, Instant.now()))
            .set("agency", new GenericData.EnumSymbol(envelope.getField("agency").schema(), "user"))
            .set(
                "payload",
                new GenericRecordBuilder(submit)
                    .set("message", new GenericRecordBuilder(message).set("blocks", List.of(block)).build())
                    .build())
            .build();
    byte[] frame = contract.encode(TOPIC_SCHEMA, value);

    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
    props.put(ProducerConfig.ACKS_CONFIG, "all");
    props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
    props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30000);
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
      ProducerRecord<byte[], byte[]> record =
          new ProducerRecord<>(args[2], loopId.getBytes(StandardCharsets.UTF_8), frame);
      // The two headers the Python producers set: type name and hex fingerprint.
      record.headers().add("ts-type", "SubmitInput".getBytes(StandardCharsets.US_ASCII));
      record
          .headers()
          .add("ts-schema", Contract.fingerprint(envelope).getBytes(StandardCharsets.US_ASCII));
      RecordMetadata meta = producer.send(record).get();
      System.out.printf(
          "{\"command_id\": %s, \"partition\": %d, \"offset\": %d}%n",
          Contract.json(commandId), meta.partition(), meta.offset());
    }
  }

  private static Schema branch(Schema union, String name) {
    for (Schema s : union.getTypes()) {
      if (s.getName().equals(name)) {
        return s;
      }
    }
    throw new IllegalArgumentException("no union branch " + name);
  }
}
