// Command writer is a minimal turnstream writer: it submits one user message
// to a loop and prints {"command_id", "partition", "offset"}.
//
//	writer SCHEMAS BOOTSTRAP COMMANDS_TOPIC LOOP_ID SESSION_ID TEXT
//
// The record key is the loop id's canonical text, and the partitioner is
// franz-go's StickyKeyPartitioner(nil): murmur2 of the key, high bit masked,
// mod the partition count -- what Kafka's Java client picks, so the record
// lands on the partition of the loop actor that owns the loop.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/turnstream/turnstream/examples/go/contract"
	"github.com/twmb/franz-go/pkg/kgo"
)

const commandsSchema = "turnstream.commands.v1"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 6 {
		return fmt.Errorf("usage: writer SCHEMAS BOOTSTRAP COMMANDS_TOPIC LOOP_ID SESSION_ID TEXT")
	}
	c, err := contract.Load(args[0])
	if err != nil {
		return err
	}
	loopID, sessionID := args[3], args[4]
	if !contract.IsCanonicalUUID(loopID) || !contract.IsCanonicalUUID(sessionID) {
		return fmt.Errorf("loop and session ids must be canonical lowercase UUIDs")
	}
	commandID := contract.NewUUID()
	// Generic values: records are maps, a union value names its branch.
	value := map[string]any{
		"command_id": commandID,
		"session_id": sessionID,
		"loop_id":    loopID,
		"created_at": time.Now().UTC(),
		"agency":     "user",
		"payload": map[string]any{
			"turnstream.v1.SubmitInput": map[string]any{
				"message": map[string]any{
					"blocks": []any{
						map[string]any{"turnstream.v1.TextBlock": map[string]any{"text": args[5]}},
					},
				},
				"no_fold": false,
			},
		},
	}
	frame, fingerprint, err := c.Encode(commandsSchema, value)
	if err != nil {
		return err
	}
	client, err := kgo.NewClient(
		kgo.SeedBrokers(args[1]),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// franz-go compresses with snappy by default; the Python services
		// (aiokafka) read uncompressed and gzip batches only.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	record := &kgo.Record{
		Topic: args[2],
		Key:   []byte(loopID),
		Value: frame,
		// The two headers the Python producers set: type name and hex fingerprint.
		Headers: []kgo.RecordHeader{
			{Key: "ts-type", Value: []byte("SubmitInput")},
			{Key: "ts-schema", Value: []byte(fingerprint)},
		},
	}
	produced, err := client.ProduceSync(ctx, record).First()
	if err != nil {
		return err
	}
	line, err := json.Marshal(map[string]any{
		"command_id": commandID, "partition": produced.Partition, "offset": produced.Offset,
	})
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}
