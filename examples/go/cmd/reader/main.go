// Command reader is a minimal turnstream reader: one JSON line per frame.
//
//	reader SCHEMAS files FRAME...                      decode frame files
//	reader SCHEMAS kafka BOOTSTRAP TOPIC COUNT SECONDS read COUNT records from the start
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/turnstream/turnstream/examples/go/contract"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "reader:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: reader SCHEMAS (files FRAME... | kafka BOOTSTRAP TOPIC COUNT SECONDS)")
	}
	c, err := contract.Load(args[0])
	if err != nil {
		return err
	}
	switch args[1] {
	case "files":
		for _, path := range args[2:] {
			frame, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if err := print(c, frame, map[string]any{"source": path}); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		return nil
	case "kafka":
		if len(args) != 6 {
			return fmt.Errorf("usage: reader SCHEMAS kafka BOOTSTRAP TOPIC COUNT SECONDS")
		}
		count, err := strconv.Atoi(args[4])
		if err != nil {
			return err
		}
		seconds, err := strconv.ParseFloat(args[5], 64)
		if err != nil {
			return err
		}
		return consume(c, args[2], args[3], count, time.Duration(seconds*float64(time.Second)))
	}
	return fmt.Errorf("unknown mode %q", args[1])
}

func print(c *contract.Contract, frame []byte, out map[string]any) error {
	ts, value, err := c.Decode(frame)
	if err != nil {
		return err
	}
	out["topic"], out["version"], out["fingerprint"] = ts.Topic, ts.Version, ts.Fingerprint
	out["type"], out["id"] = contract.TypeOf(value), contract.IDOf(value)
	line, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

func consume(c *contract.Contract, bootstrap, topic string, count int, timeout time.Duration) error {
	client, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// The journal is written in transactions: read only what was committed.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seen := 0
	for seen < count {
		fetches := client.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read %d of %d records of %s before the timeout", seen, count, topic)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return fmt.Errorf("fetch: %v", errs[0].Err)
		}
		var failure error
		fetches.EachRecord(func(r *kgo.Record) {
			if failure != nil {
				return
			}
			failure = record(c, topic, r)
			seen++
		})
		if failure != nil {
			return failure
		}
	}
	return nil
}

func record(c *contract.Contract, topic string, r *kgo.Record) error {
	key := string(r.Key)
	// The key is the loop id as canonical lowercase UUID text.
	if !contract.IsCanonicalUUID(key) {
		return fmt.Errorf("key %q is not a canonical UUID", key)
	}
	_, value, err := c.Decode(r.Value)
	if err != nil {
		return fmt.Errorf("%s/%d@%d: %w", topic, r.Partition, r.Offset, err)
	}
	if loop := contract.LoopOf(value); loop == nil || *loop != key {
		return fmt.Errorf("%s/%d@%d: key %s is not the value's loop id", topic, r.Partition, r.Offset, key)
	}
	var tsType *string
	for _, h := range r.Headers {
		if h.Key == "ts-type" {
			v := string(h.Value)
			tsType = &v
		}
	}
	return print(c, r.Value, map[string]any{
		"source": topic, "partition": r.Partition, "offset": r.Offset, "key": key, "ts_type": tsType,
	})
}
