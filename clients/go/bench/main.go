// A benchmark, not a test: enqueues JOBS jobs (default 20000) due now to a
// fresh topic in batches of 1000, then runs the Go worker with a no-op
// handler at concurrency 16 until all are acked, and prints
// "jobs/s: <n>" (acked jobs / seconds from the worker's start to the last ack).
//
//	DQ_URL=http://127.0.0.1:7070 JOBS=20000 go run ./bench
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"time"

	dq "github.com/dq-project/dq/clients/go"
)

func main() {
	url := os.Getenv("DQ_URL")
	if url == "" {
		url = "http://127.0.0.1:7070"
	}
	total := 20000
	if v := os.Getenv("JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			log.Fatalf("JOBS=%q is not a positive number", v)
		}
		total = n
	}
	client, err := dq.NewClient(url, dq.WithAPIKey(os.Getenv("DQ_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	topic := fmt.Sprintf("bench-go-%d", time.Now().UnixNano())
	for from := 0; from < total; from += 1000 {
		n := total - from
		if n > 1000 {
			n = 1000
		}
		batch := make([]dq.NewJob, n)
		for i := range batch {
			batch[i] = dq.NewJob{Body: map[string]int{"n": from + i}}
		}
		res, err := client.EnqueueBatch(ctx, topic, batch)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				log.Fatal(r.Err)
			}
		}
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := dq.NewWorker(client, dq.WorkerOptions{Concurrency: 16, Logger: log.New(io.Discard, "", 0)})
	w.Handle(topic, func(context.Context, *dq.Job) error { return nil })
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()

	// Acks are sent in batches beside the handlers: the last ack is when
	// the topic's acked counter reaches JOBS.
	var last time.Time
	for {
		info, err := client.Topic(ctx, topic)
		if err == nil && info.Stats.Counters.Acked >= int64(total) {
			last = time.Now()
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	secs := last.Sub(start).Seconds()
	_, _ = client.DeleteTopic(ctx, topic)
	fmt.Printf("jobs/s: %.0f\n", float64(total)/secs)
}
