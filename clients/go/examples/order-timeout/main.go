// The order-timeout example: close an order 30 minutes after it is placed
// unless it was paid. The shop enqueues one job per order when it is
// placed; this worker handles each job at its due time.
//
//	DQ_URL=http://127.0.0.1:7070 go run ./examples/order-timeout           # the worker
//	DQ_URL=http://127.0.0.1:7070 go run ./examples/order-timeout place 42  # place order 42
//
// SIGTERM or SIGINT stops the worker gracefully: it stops reserving, lets
// the running handlers finish and acks them; nothing is left reserved.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	dq "github.com/dq-project/dq/clients/go"
)

type orderTimeout struct {
	Order int64 `json:"order"`
}

func main() {
	url := os.Getenv("DQ_URL")
	if url == "" {
		url = "http://127.0.0.1:7070"
	}
	topic := os.Getenv("TOPIC")
	if topic == "" {
		topic = "close-unpaid"
	}
	client, err := dq.NewClient(url, dq.WithAPIKey(os.Getenv("DQ_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}

	if len(os.Args) == 3 && os.Args[1] == "place" {
		order, err := strconv.ParseInt(os.Args[2], 10, 64)
		if err != nil {
			log.Fatal(err)
		}
		// One job per order, due in 30 minutes; the id makes a retry of
		// this call harmless.
		job, err := client.Enqueue(context.Background(), topic, orderTimeout{Order: order},
			&dq.EnqueueOptions{ID: fmt.Sprintf("order-%d", order), Delay: 30 * time.Minute})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("order %d closes at %s unless paid\n", order, job.DueAt().Format(time.RFC3339))
		return
	}

	slow := time.Duration(0)
	if ms, err := strconv.Atoi(os.Getenv("SLOW_MS")); err == nil {
		slow = time.Duration(ms) * time.Millisecond
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	worker := dq.NewWorker(client, dq.WorkerOptions{Concurrency: 4})
	worker.Handle(topic, func(ctx context.Context, job *dq.Job) error {
		var o orderTimeout
		if err := job.Decode(&o); err != nil {
			return dq.Dead(fmt.Errorf("bad body %s: %w", job.Body, err)) // never retried
		}
		fmt.Printf("started %s\n", job.ID)
		time.Sleep(slow)
		if err := closeIfUnpaid(ctx, o.Order); err != nil {
			return err // nacked: retried per the topic's policy, then dead
		}
		fmt.Printf("closed %s\n", job.ID)
		return nil // acked
	})
	if err := worker.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stopped")
}

// closeIfUnpaid is your work; it must be idempotent (a job can come twice):
// e.g. UPDATE orders SET status = 'closed' WHERE id = ? AND status = 'unpaid'.
func closeIfUnpaid(ctx context.Context, order int64) error {
	if order < 0 {
		return errors.New("no such order")
	}
	return nil
}
