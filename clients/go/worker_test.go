package dq_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dq "github.com/dq-project/dq/clients/go"
)

// runWorker starts w.Run in a goroutine; stop cancels it and waits for Run
// to return (failing the test after limit).
func runWorker(t *testing.T, w *dq.Worker, limit time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(limit):
				t.Errorf("Run did not return within %v of the stop", limit)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func topicStats(t *testing.T, c *dq.Client, topic string) *dq.TopicStats {
	t.Helper()
	info, err := c.Topic(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return info.Stats
}

func TestWorkerThousandJobsDueOverTwoSeconds(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		ctx := ctxT(t, 90*time.Second)
		c := s.client(t)
		topic := topicName(t)
		const total = 1000

		var mu sync.Mutex
		seen := map[string]int{}
		var early []string
		// Handlers running at once, and the most seen: never above the limit.
		var running, most atomic.Int32
		w := dq.NewWorker(c, dq.WorkerOptions{Concurrency: 4, Logger: testLogger(t)})
		w.Handle(topic, func(ctx context.Context, job *dq.Job) error {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(2 * time.Millisecond)
			now := time.Now().UnixMilli()
			mu.Lock()
			defer mu.Unlock()
			seen[job.ID]++
			if now < job.DueAtMs {
				early = append(early, fmt.Sprintf("%s %d ms early", job.ID, job.DueAtMs-now))
			}
			var body struct{ N int }
			if err := job.Decode(&body); err != nil || fmt.Sprintf("job-%d", body.N) != job.ID {
				return dq.Dead(fmt.Errorf("bad body %s", job.Body))
			}
			return nil
		})
		stop := runWorker(t, w, 15*time.Second)

		base := time.Now().Add(500 * time.Millisecond)
		for from := 0; from < total; from += 250 {
			batch := make([]dq.NewJob, 0, 250)
			for i := from; i < from+250; i++ {
				batch = append(batch, dq.NewJob{
					Body:           map[string]int{"n": i},
					EnqueueOptions: dq.EnqueueOptions{ID: fmt.Sprintf("job-%d", i), DueAt: base.Add(time.Duration(i) * 2 * time.Millisecond)},
				})
			}
			res, err := c.EnqueueBatch(ctx, topic, batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			}
		}
		waitFor(t, 60*time.Second, "1000 jobs handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) == total
		})
		stop()

		mu.Lock()
		defer mu.Unlock()
		if len(early) > 0 {
			t.Errorf("%d jobs handled before their due time, e.g. %v", len(early), early[0])
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("%s handled %d times", id, n)
			}
		}
		st := topicStats(t, c, topic)
		if st.Scheduled+st.Ready+st.Reserved+st.Dead != 0 || st.Counters.Acked != total {
			t.Errorf("after the run: %+v", st)
		}
		if ws := w.Stats(); ws.Done != total {
			t.Errorf("worker stats: %+v", ws)
		}
		if m := most.Load(); m > 4 {
			t.Errorf("%d handlers ran at once with a concurrency of 4", m)
		}
		// The acks went in batches (of what was done while the call before
		// was in flight: at this rate a few each), none one by one; this
		// server, the test's own, counts the calls of each route.
		batches, singles := ackCalls(t, s.URL)
		if singles != 0 || batches == 0 || batches >= total {
			t.Errorf("%d jobs acked with %d ack:batch calls and %d single acks", total, batches, singles)
		}
	})
}

// ackCalls reads dq's /metrics: the ack:batch calls and the single acks it
// has answered 200.
func ackCalls(t *testing.T, url string) (batches, singles int) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	count := func(route string) int {
		prefix := `dq_http_request_duration_seconds_count{method="POST",route="` + route + `",status="200"} `
		for _, line := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(line, prefix) {
				n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, prefix)))
				if err != nil {
					t.Fatalf("metrics line %q: %v", line, err)
				}
				return n
			}
		}
		return 0
	}
	return count("/v1/ack:batch"), count("/v1/topics/{topic}/jobs/{id}/ack")
}

func TestWorkerFailingHandlerRetriedThenDead(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		ctx := ctxT(t, 60*time.Second)
		c := s.client(t)
		topic := topicName(t)
		if _, err := c.ConfigureTopic(ctx, topic, dq.TopicSettings{
			MaxAttempts: dq.Int(3), Retry: &dq.RetryPolicy{FixedMs: dq.Int64(50)},
		}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		attempts := map[string][]int{}
		w := dq.NewWorker(c, dq.WorkerOptions{Concurrency: 4, Logger: testLogger(t)})
		w.Handle(topic, func(ctx context.Context, job *dq.Job) error {
			mu.Lock()
			attempts[job.ID] = append(attempts[job.ID], job.Attempt)
			n := len(attempts[job.ID])
			mu.Unlock()
			switch job.ID {
			case "fails":
				return errors.New("payment service said no")
			case "panics":
				panic("nil order")
			case "dead":
				return dq.Dead(errors.New("order does not exist"))
			case "later":
				if n == 1 {
					return dq.RetryLater(100 * time.Millisecond)
				}
				return nil
			}
			return nil
		})
		stop := runWorker(t, w, 15*time.Second)
		for _, id := range []string{"fails", "panics", "dead", "later"} {
			if _, err := c.Enqueue(ctx, topic, map[string]string{"id": id}, &dq.EnqueueOptions{ID: id}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 30*time.Second, "three dead letters and one done job", func() bool {
			st := topicStats(t, c, topic)
			return st.Dead == 3 && st.Counters.Acked == 1
		})
		stop()
		dead, err := c.ListDead(ctx, topic, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"fails": "payment service said no", "panics": "handler panicked: nil order", "dead": "order does not exist"}
		for _, d := range dead {
			if d.LastError == nil || *d.LastError != want[d.ID] {
				t.Errorf("dead %s: last error %v, want %q", d.ID, d.LastError, want[d.ID])
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(attempts["fails"]) != "[1 2 3]" || fmt.Sprint(attempts["panics"]) != "[1 2 3]" {
			t.Errorf("attempts: %v", attempts)
		}
		if len(attempts["dead"]) != 1 {
			t.Errorf("a dq.Dead job was retried: %v", attempts["dead"])
		}
		if fmt.Sprint(attempts["later"]) != "[1 1]" {
			t.Errorf("dq.RetryLater counted the attempt: %v", attempts["later"])
		}
		if ws := w.Stats(); ws.Failed != 6 || ws.Panicked != 3 || ws.Dead != 1 || ws.Retried != 1 || ws.Done != 1 {
			t.Errorf("worker stats: %+v", ws)
		}
	})
}

func TestWorkerSlowHandlerKeepsItsLease(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		ctx := ctxT(t, 60*time.Second)
		c := s.client(t)
		topic := topicName(t)
		var deliveries int32
		started := make(chan struct{}, 10)
		handler := func(ctx context.Context, job *dq.Job) error {
			atomic.AddInt32(&deliveries, 1)
			started <- struct{}{}
			time.Sleep(3 * time.Second) // three leases long
			return nil
		}
		// Two workers on the topic: the job must not be handed to the other.
		w1 := dq.NewWorker(c, dq.WorkerOptions{Concurrency: 2, Lease: time.Second, Logger: testLogger(t)})
		w1.Handle(topic, handler)
		w2 := dq.NewWorker(c, dq.WorkerOptions{Concurrency: 2, Lease: time.Second, Logger: testLogger(t)})
		w2.Handle(topic, handler)
		stop1 := runWorker(t, w1, 15*time.Second)
		stop2 := runWorker(t, w2, 15*time.Second)
		if _, err := c.Enqueue(ctx, topic, "slow", &dq.EnqueueOptions{ID: "slow"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the job was not handed out")
		}
		waitFor(t, 20*time.Second, "the slow job acked", func() bool {
			return topicStats(t, c, topic).Counters.Acked == 1
		})
		stop1()
		stop2()
		st := topicStats(t, c, topic)
		if n := atomic.LoadInt32(&deliveries); n != 1 {
			t.Errorf("delivered %d times", n)
		}
		if st.Counters.Expired != 0 || st.Counters.Failed != 0 || st.Counters.Acked != 1 || st.Reserved != 0 {
			t.Errorf("stats: %+v", st)
		}
		if d := w1.Stats().Done + w2.Stats().Done; d != 1 {
			t.Errorf("acked %d times", d)
		}
	})
}

func TestWorkerStopMidRun(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		ctx := ctxT(t, 60*time.Second)
		c := s.client(t)
		topic := topicName(t)
		const total = 30
		var mu sync.Mutex
		var startedIDs, finishedIDs []string
		started := make(chan struct{}, total)
		w := dq.NewWorker(c, dq.WorkerOptions{Concurrency: 4, Batch: 10, Lease: 10 * time.Second, Grace: 10 * time.Second, Logger: testLogger(t)})
		w.Handle(topic, func(ctx context.Context, job *dq.Job) error {
			mu.Lock()
			startedIDs = append(startedIDs, job.ID)
			mu.Unlock()
			started <- struct{}{}
			time.Sleep(time.Second)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			mu.Lock()
			finishedIDs = append(finishedIDs, job.ID)
			mu.Unlock()
			return nil
		})
		jobs := make([]dq.NewJob, total)
		for i := range jobs {
			jobs[i] = dq.NewJob{Body: i, EnqueueOptions: dq.EnqueueOptions{ID: fmt.Sprintf("j%d", i)}}
		}
		if _, err := c.EnqueueBatch(ctx, topic, jobs); err != nil {
			t.Fatal(err)
		}
		stop := runWorker(t, w, 15*time.Second)
		for i := 0; i < 4; i++ {
			select {
			case <-started:
			case <-time.After(20 * time.Second):
				t.Fatal("handlers did not start")
			}
		}
		stopped := time.Now()
		stop() // the stop signal mid-run, with 4 handlers running
		if time.Since(stopped) > 5*time.Second {
			t.Errorf("the stop took %v", time.Since(stopped))
		}
		mu.Lock()
		defer mu.Unlock()
		if len(startedIDs) < 4 || len(finishedIDs) != len(startedIDs) {
			t.Fatalf("started %v, finished %v", startedIDs, finishedIDs)
		}
		for _, id := range finishedIDs {
			if _, err := c.Get(ctx, topic, id); !dq.IsNotFound(err) {
				t.Errorf("in-flight job %s not acked: %v", id, err)
			}
		}
		st := topicStats(t, c, topic)
		if st.Reserved != 0 || st.Counters.Acked != int64(len(finishedIDs)) || st.Ready != int64(total-len(finishedIDs)) || st.Counters.Failed != 0 {
			t.Errorf("after the stop: %+v (finished %d)", st, len(finishedIDs))
		}
		// Four jobs were reserved ahead (Prefetch defaults to Concurrency)
		// and never started: given back, their attempt not counted.
		if ws := w.Stats(); ws.HandedBack == 0 || ws.Done != int64(len(finishedIDs)) {
			t.Errorf("worker stats: %+v", ws)
		}
		for i := 0; i < total; i++ {
			j, err := c.Get(ctx, topic, fmt.Sprintf("j%d", i))
			if err == nil && (j.State != "ready" || j.Attempts != 0) {
				t.Errorf("job left behind: %+v", j)
			}
		}
	})
}

func TestWorkerReconnectsAfterDqRestart(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		ctx := ctxT(t, 90*time.Second)
		c := s.client(t)
		topic := topicName(t)
		const total = 200
		var mu sync.Mutex
		done := map[string]bool{}
		w := dq.NewWorker(c, dq.WorkerOptions{Concurrency: 4, Lease: 2 * time.Second, Logger: testLogger(t)})
		w.Handle(topic, func(ctx context.Context, job *dq.Job) error {
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			done[job.ID] = true
			mu.Unlock()
			return nil
		})
		jobs := make([]dq.NewJob, total)
		base := time.Now()
		for i := range jobs {
			jobs[i] = dq.NewJob{Body: i, EnqueueOptions: dq.EnqueueOptions{ID: fmt.Sprintf("r%d", i), DueAt: base.Add(time.Duration(i) * 15 * time.Millisecond)}}
		}
		if _, err := c.EnqueueBatch(ctx, topic, jobs); err != nil {
			t.Fatal(err)
		}
		stop := runWorker(t, w, 20*time.Second)
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(done)
		}
		waitFor(t, 30*time.Second, "some jobs done", func() bool { return count() >= 40 })
		s.kill()
		before := count()
		time.Sleep(time.Second) // dq is down for a second
		s.start()
		waitFor(t, 60*time.Second, "every job done after the restart", func() bool { return count() == total })
		if before >= total {
			t.Fatalf("all jobs were done before the restart (%d)", before)
		}
		waitFor(t, 30*time.Second, "nothing left in the topic", func() bool {
			st := topicStats(t, c, topic)
			return st.Scheduled+st.Ready+st.Reserved == 0
		})
		stop()
		st := topicStats(t, c, topic)
		if st.Dead != 0 || st.Scheduled+st.Ready+st.Reserved != 0 {
			t.Errorf("after the run: %+v", st)
		}
	})
}

func TestWorkerBadTopicFailsFast(t *testing.T) {
	s := startServer(t, "embedded")
	w := dq.NewWorker(s.client(t), dq.WorkerOptions{Logger: testLogger(t)})
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("Run without handlers")
	}
	w.Handle("bad topic!", func(context.Context, *dq.Job) error { return nil })
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	select {
	case err := <-done:
		if !dq.IsCode(err, "invalid_topics") && !dq.IsCode(err, "invalid_topic") {
			t.Fatalf("want invalid_topic(s), got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run kept going with a bad topic")
	}
}

// A handler still running when the grace period ends gets its ctx
// cancelled; its job is given back, the attempt not counted.
func TestWorkerGraceEndsCancelsHandlers(t *testing.T) {
	s := startServer(t, "embedded")
	ctx := ctxT(t, 30*time.Second)
	c := s.client(t)
	topic := topicName(t)
	started := make(chan struct{}, 1)
	w := dq.NewWorker(c, dq.WorkerOptions{Concurrency: 1, Prefetch: -1, Grace: 300 * time.Millisecond, Logger: testLogger(t)})
	w.Handle(topic, func(ctx context.Context, job *dq.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	if _, err := c.Enqueue(ctx, topic, 1, &dq.EnqueueOptions{ID: "stuck"}); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w, 10*time.Second)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("not started")
	}
	stop()
	j, err := c.Get(ctx, topic, "stuck")
	if err != nil || j.State != "ready" || j.Attempts != 0 {
		t.Fatalf("after the grace: %+v %v", j, err)
	}
	if st := topicStats(t, c, topic); st.Counters.Failed != 0 || st.Reserved != 0 {
		t.Fatalf("stats: %+v", st)
	}
}
