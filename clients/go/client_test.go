package dq_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	dq "github.com/dq-project/dq/clients/go"
)

func apiErr(t *testing.T, err error, status int, code string) {
	t.Helper()
	var e *dq.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *dq.Error %d %s, got %T %v", status, code, err, err)
	}
	if e.Status != status || e.Code != code {
		t.Fatalf("want %d %s, got %d %s (%s)", status, code, e.Status, e.Code, e.Message)
	}
	if e.Message == "" {
		t.Fatalf("error without a message: %+v", e)
	}
}

func TestClientJobs(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		ctx := ctxT(t, 60*time.Second)
		c := s.client(t)
		topic := topicName(t)

		// A body comes back as the very text that was sent.
		raw := json.RawMessage(`{"b": 1e400,  "a":[18446744073709551617, -0, "<\u00e9>"] }`)
		enq, err := c.Enqueue(ctx, topic, raw, &dq.EnqueueOptions{ID: "order/42", Delay: time.Hour, Priority: dq.Uint32(7), Key: "customer-1"})
		if err != nil {
			t.Fatal(err)
		}
		if enq.ID != "order/42" || !enq.Created || enq.State != "scheduled" || enq.DueAtMs < time.Now().Add(59*time.Minute).UnixMilli() {
			t.Fatalf("enqueue: %+v", enq)
		}
		got, err := c.Get(ctx, topic, "order/42")
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Body) != string(raw) || got.State != "scheduled" || got.Priority != 7 || got.Key != "customer-1" || got.Topic != topic {
			t.Fatalf("get: %+v body %s", got, got.Body)
		}
		// The same id again: nothing changes.
		again, err := c.Enqueue(ctx, topic, map[string]int{"x": 1}, &dq.EnqueueOptions{ID: "order/42"})
		if err != nil || again.Created || again.Replaced {
			t.Fatalf("enqueue again: %+v %v", again, err)
		}
		// Replace a waiting job.
		rep, err := c.Enqueue(ctx, topic, map[string]int{"x": 2}, &dq.EnqueueOptions{ID: "order/42", Replace: true, DueAt: time.Now().Add(2 * time.Hour)})
		if err != nil || !rep.Replaced {
			t.Fatalf("replace: %+v %v", rep, err)
		}
		// Reschedule, then into the past: due now.
		due, err := c.RescheduleIn(ctx, topic, "order/42", 10*time.Minute)
		if err != nil || due.Before(time.Now().Add(9*time.Minute)) {
			t.Fatalf("reschedule in: %v %v", due, err)
		}
		if _, err := c.Reschedule(ctx, topic, "order/42", time.Now().Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		// Bytes.
		if _, err := c.Enqueue(ctx, topic, dq.Bytes{0, 1, 2, 255}, &dq.EnqueueOptions{ID: "bytes", Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		b, err := c.Get(ctx, topic, "bytes")
		if err != nil || string(b.BodyBytes()) != string([]byte{0, 1, 2, 255}) {
			t.Fatalf("bytes: %+v %v", b, err)
		}
		// Cancel.
		state, err := c.Cancel(ctx, topic, "bytes")
		if err != nil || state != "scheduled" {
			t.Fatalf("cancel: %q %v", state, err)
		}
		_, err = c.Get(ctx, topic, "bytes")
		apiErr(t, err, 404, "job_not_found")
		if !dq.IsNotFound(err) || !dq.IsCode(err, "job_not_found") {
			t.Fatal("IsNotFound / IsCode")
		}
		// Dedup window: an ended job's id stores nothing again.
		if _, err := c.Enqueue(ctx, topic, nil, &dq.EnqueueOptions{ID: "dedup", DedupWindow: time.Minute, Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Cancel(ctx, topic, "dedup"); err != nil {
			t.Fatal(err)
		}
		dd, err := c.Enqueue(ctx, topic, nil, &dq.EnqueueOptions{ID: "dedup"})
		if err != nil || !dd.Deduplicated {
			t.Fatalf("dedup: %+v %v", dd, err)
		}

		// Batch: one bad item is refused, the others written.
		res, err := c.EnqueueBatch(ctx, topic, []dq.NewJob{
			{Body: map[string]int{"n": 1}, EnqueueOptions: dq.EnqueueOptions{ID: "b1", Delay: time.Hour}},
			{Body: json.RawMessage(`[1, 2]`), EnqueueOptions: dq.EnqueueOptions{ID: "b2", Delay: -time.Second}},
			{Body: "text", EnqueueOptions: dq.EnqueueOptions{Delay: time.Hour}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 3 || res[0].Err != nil || !res[0].Enqueued.Created || res[2].Err != nil || res[2].Enqueued.ID == "" {
			t.Fatalf("batch: %+v", res)
		}
		apiErr(t, res[1].Err, 400, "invalid_delay")

		// Reserve, touch, release, nack, ack.
		jobs, err := c.Reserve(ctx, []string{topic}, &dq.ReserveOptions{Max: 10, Lease: 5 * time.Second, Wait: time.Second})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("reserve: %v %v", jobs, err)
		}
		j := jobs[0]
		if j.ID != "order/42" || j.Attempt != 1 || j.Token == "" || string(j.Body) != `{"x":2}` || j.Topic != topic {
			t.Fatalf("leased: %+v %s", j, j.Body)
		}
		_, err = c.Reschedule(ctx, topic, j.ID, time.Now())
		apiErr(t, err, 409, "not_in_state")
		dl, err := c.Touch(ctx, topic, j.ID, j.Token, 20*time.Second)
		if err != nil || dl.Before(time.Now().Add(19*time.Second)) {
			t.Fatalf("touch: %v %v", dl, err)
		}
		if _, err := c.Release(ctx, topic, j.ID, j.Token, 0); err != nil {
			t.Fatal(err)
		}
		err = c.Ack(ctx, topic, j.ID, j.Token)
		apiErr(t, err, 409, "lease_mismatch")
		jobs, err = c.Reserve(ctx, []string{topic}, &dq.ReserveOptions{Max: 1, Wait: time.Second})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("reserve again: %v %v", jobs, err)
		}
		j = jobs[0]
		n, err := c.Nack(ctx, topic, j.ID, j.Token, "boom", &dq.NackOptions{RetryIn: 50 * time.Millisecond})
		if err != nil || n.State != "scheduled" {
			t.Fatalf("nack: %+v %v", n, err)
		}
		info, err := c.Get(ctx, topic, j.ID)
		if err != nil || info.LastError == nil || *info.LastError != "boom" {
			t.Fatalf("last error: %+v %v", info, err)
		}
		if len(info.Errors) != 1 || info.Errors[0].Attempt != 1 || info.Errors[0].Error != "boom" || info.Errors[0].AtMs == 0 {
			t.Fatalf("errors: %+v", info.Errors)
		}
		jobs, err = c.Reserve(ctx, []string{topic}, &dq.ReserveOptions{Max: 1, Wait: 5 * time.Second})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("reserve after nack: %v %v", jobs, err)
		}
		j = jobs[0]
		if err := c.Ack(ctx, topic, j.ID, j.Token); err != nil {
			t.Fatal(err)
		}
		_, err = c.Get(ctx, topic, j.ID)
		apiErr(t, err, 404, "job_not_found")
		err = c.Ack(ctx, topic, j.ID, j.Token)
		apiErr(t, err, 404, "job_not_found")

		// Batches of ack, nack, touch.
		for _, id := range []string{"b1", res[2].Enqueued.ID} {
			if _, err := c.Reschedule(ctx, topic, id, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		// A reserve answers with what it found first (on Redis, the jobs
		// of one partition may come before the others'): reserve until both.
		jobs = nil
		for deadline := time.Now().Add(5 * time.Second); len(jobs) < 2 && time.Now().Before(deadline); {
			more, err := c.Reserve(ctx, []string{topic}, &dq.ReserveOptions{Max: 10, Wait: time.Second})
			if err != nil {
				t.Fatalf("reserve two: %v", err)
			}
			jobs = append(jobs, more...)
		}
		if len(jobs) != 2 {
			t.Fatalf("reserve two: %v", jobs)
		}
		tr, err := c.TouchBatch(ctx, []dq.TouchItem{
			{Topic: topic, ID: jobs[0].ID, Token: jobs[0].Token, LeaseMs: 10000},
			{Topic: topic, ID: jobs[1].ID, Token: "wrong"},
		})
		if err != nil || tr[0].Err != nil || tr[0].LeaseDeadline.Before(time.Now().Add(9*time.Second)) {
			t.Fatalf("touch batch: %+v %v", tr, err)
		}
		apiErr(t, tr[1].Err, 409, "lease_mismatch")
		nr, err := c.NackBatch(ctx, []dq.NackItem{{Topic: topic, ID: jobs[1].ID, Token: jobs[1].Token, Error: "bad", Dead: true}})
		if err != nil || nr[0].Err != nil || nr[0].Nacked.State != "dead" {
			t.Fatalf("nack batch: %+v %v", nr, err)
		}
		ar, err := c.AckBatch(ctx, []dq.AckItem{
			{Topic: topic, ID: jobs[0].ID, Token: jobs[0].Token},
			{Topic: topic, ID: "nope", Token: "x"},
		})
		if err != nil || ar[0] != nil {
			t.Fatalf("ack batch: %v %v", ar, err)
		}
		apiErr(t, ar[1], 404, "job_not_found")

		// Dead letters: list, replay, purge.
		dead, err := c.ListDead(ctx, topic, 0, 10)
		if err != nil || len(dead) != 1 || dead[0].ID != jobs[1].ID || dead[0].LastError == nil || *dead[0].LastError != "bad" {
			t.Fatalf("dead: %+v %v", dead, err)
		}
		if n, err := c.ReplayDead(ctx, topic, []string{jobs[1].ID}); err != nil || n != 1 {
			t.Fatalf("replay: %d %v", n, err)
		}
		jobs, err = c.Reserve(ctx, []string{topic}, &dq.ReserveOptions{Max: 1, Wait: time.Second})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("reserve replayed: %v %v", jobs, err)
		}
		if err := c.NackDead(ctx, topic, jobs[0].ID, jobs[0].Token, "bad again"); err != nil {
			t.Fatal(err)
		}
		if n, err := c.PurgeDead(ctx, topic); err != nil || n != 1 {
			t.Fatalf("purge: %d %v", n, err)
		}
		if n, err := c.ReplayDead(ctx, topic, nil); err != nil || n != 0 {
			t.Fatalf("replay all: %d %v", n, err)
		}
	})
}

func TestClientTopicsAndSchedules(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		ctx := ctxT(t, 60*time.Second)
		c := s.client(t)
		topic := topicName(t)

		cfg, err := c.ConfigureTopic(ctx, topic, dq.TopicSettings{
			MaxAttempts: dq.Int(3), LeaseMs: dq.Int64(5000),
			Retry:     &dq.RetryPolicy{DelaysMs: []int64{100, 200}},
			RateLimit: &dq.RateLimit{Limit: 100, PerMs: 1000},
		})
		if err != nil || cfg.MaxAttempts != 3 || cfg.LeaseMs != 5000 || cfg.RateLimit == nil || cfg.RateLimit.Limit != 100 {
			t.Fatalf("configure: %+v %v", cfg, err)
		}
		cfg, err = c.ConfigureTopic(ctx, topic, dq.TopicSettings{Raw: map[string]json.RawMessage{"rate_limit": json.RawMessage("null")}})
		if err != nil || cfg.RateLimit != nil || cfg.MaxAttempts != 3 {
			t.Fatalf("remove rate limit: %+v %v", cfg, err)
		}
		_, err = c.ConfigureTopic(ctx, topic, dq.TopicSettings{MaxAttempts: dq.Int(0)})
		apiErr(t, err, 400, "invalid_max_attempts")

		if _, err := c.Enqueue(ctx, topic, 1, &dq.EnqueueOptions{Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
		info, err := c.Topic(ctx, topic)
		if err != nil || info.Name != topic || info.Stats.Scheduled != 1 || info.Config.MaxAttempts != 3 || info.Stats.Counters.Enqueued != 1 {
			t.Fatalf("topic: %+v %v", info, err)
		}
		if info.ConfigSources["max_attempts"] != "set" || info.ConfigSources["partitions"] != "default" {
			t.Fatalf("config sources: %+v", info.ConfigSources)
		}
		all, err := c.Topics(ctx, topic)
		if err != nil || len(all) != 1 || all[0].Name != topic {
			t.Fatalf("topics: %+v %v", all, err)
		}
		page, err := c.ListTopics(ctx, dq.ListTopicsOptions{Prefix: topic, Limit: 1})
		if err != nil || len(page.Topics) != 1 {
			t.Fatalf("list topics: %+v %v", page, err)
		}
		if n, err := c.DeleteTopic(ctx, topic); err != nil || n != 1 {
			t.Fatalf("delete topic: %d %v", n, err)
		}
		_, err = c.Topic(ctx, topic)
		apiErr(t, err, 404, "topic_not_found")
		_, err = c.ListDead(ctx, topic, 0, 10)
		apiErr(t, err, 404, "topic_not_found")

		// Schedules.
		name := "sched-" + topic[len(topic)-8:]
		sc, err := c.PutSchedule(ctx, name, dq.ScheduleSpec{Topic: topic, Every: "1h", Body: json.RawMessage(`{"report":"daily"}`)})
		if err != nil || sc.Name != name || len(sc.Next) == 0 {
			t.Fatalf("put schedule: %+v %v", sc, err)
		}
		t.Cleanup(func() { _ = c.DeleteSchedule(context.Background(), name) })
		list, err := c.Schedules(ctx)
		found := false
		for _, x := range list {
			found = found || x.Name == name
		}
		if err != nil || !found {
			t.Fatalf("schedules: %+v %v", list, err)
		}
		if p, err := c.PauseSchedule(ctx, name); err != nil || len(p.Next) != 0 {
			t.Fatalf("pause: %+v %v", p, err)
		}
		if r, err := c.ResumeSchedule(ctx, name); err != nil || len(r.Next) == 0 {
			t.Fatalf("resume: %+v %v", r, err)
		}
		if g, err := c.Schedule(ctx, name); err != nil || g.Name != name {
			t.Fatalf("schedule: %+v %v", g, err)
		}
		if err := c.DeleteSchedule(ctx, name); err != nil {
			t.Fatal(err)
		}
		_, err = c.Schedule(ctx, name)
		apiErr(t, err, 404, "schedule_not_found")
		_, err = c.PutSchedule(ctx, name, dq.ScheduleSpec{Topic: topic, Cron: "not a cron"})
		apiErr(t, err, 400, "invalid_cron")
	})
}

func TestClientErrors(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		ctx := ctxT(t, 60*time.Second)
		c := s.client(t)
		topic := topicName(t)

		_, err := c.Enqueue(ctx, "bad topic!", 1, nil)
		apiErr(t, err, 400, "invalid_topic")
		_, err = c.Enqueue(ctx, topic, 1, &dq.EnqueueOptions{Delay: -time.Second})
		apiErr(t, err, 400, "invalid_delay")
		_, err = c.Enqueue(ctx, topic, 1, &dq.EnqueueOptions{Delay: time.Second, DueAt: time.Now()})
		apiErr(t, err, 400, "invalid_delay")
		_, err = c.Enqueue(ctx, topic, 1, &dq.EnqueueOptions{Lease: time.Millisecond})
		apiErr(t, err, 400, "invalid_lease")
		_, err = c.Enqueue(ctx, topic, 1, &dq.EnqueueOptions{Key: "has space"})
		apiErr(t, err, 400, "invalid_key")
		_, err = c.Enqueue(ctx, topic, json.RawMessage(`{"x":`), nil)
		if err == nil {
			t.Fatal("invalid JSON body accepted")
		}
		_, err = c.Reserve(ctx, []string{topic}, &dq.ReserveOptions{Max: 5000})
		apiErr(t, err, 400, "invalid_max")
		_, err = c.Reserve(ctx, nil, nil)
		apiErr(t, err, 400, "invalid_topics")
		_, err = c.EnqueueBatch(ctx, topic, nil)
		apiErr(t, err, 400, "invalid_batch")

		_, err = c.Get(ctx, topic, "missing")
		apiErr(t, err, 404, "job_not_found")
		_, err = c.Cancel(ctx, topic, "missing")
		apiErr(t, err, 404, "job_not_found")
		_, err = c.Nack(ctx, topic, "missing", "tok", "x", nil)
		apiErr(t, err, 404, "job_not_found")

		if _, err := c.Enqueue(ctx, topic, 1, &dq.EnqueueOptions{ID: "j"}); err != nil {
			t.Fatal(err)
		}
		jobs, err := c.Reserve(ctx, []string{topic}, &dq.ReserveOptions{Wait: time.Second})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("reserve: %v %v", jobs, err)
		}
		err = c.Ack(ctx, topic, "j", "wrong-token")
		apiErr(t, err, 409, "lease_mismatch")
		_, err = c.Touch(ctx, topic, "j", "wrong-token", 0)
		apiErr(t, err, 409, "lease_mismatch")
		_, err = c.Release(ctx, topic, "j", "wrong-token", 0)
		apiErr(t, err, 409, "lease_mismatch")
		_, err = c.Nack(ctx, topic, "j", "wrong-token", "x", nil)
		apiErr(t, err, 409, "lease_mismatch")
		if err := c.Ack(ctx, topic, "j", jobs[0].Token); err != nil {
			t.Fatal(err)
		}

		// Nobody listening: a transport error, after the retry budget.
		dead, _ := dq.NewClient("http://127.0.0.1:1", dq.WithRetryBudget(300*time.Millisecond))
		start := time.Now()
		_, err = dead.Get(ctx, topic, "j")
		var te *dq.TransportError
		if !errors.As(err, &te) {
			t.Fatalf("want *dq.TransportError, got %T %v", err, err)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("retried beyond its budget: %v", time.Since(start))
		}
		if _, err := dq.NewClient("localhost:7070"); err == nil {
			t.Fatal("a URL without scheme accepted")
		}
	})
}

// TestClientKeepsConnectionsAlive: calls one after the other go over one
// pooled connection, not a new one each.
func TestClientKeepsConnectionsAlive(t *testing.T) {
	eachStore(t, func(t *testing.T, s *server) {
		var mu sync.Mutex
		var fresh, reused int
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			mu.Lock()
			defer mu.Unlock()
			if info.Reused {
				reused++
			} else {
				fresh++
			}
		}}
		ctx := httptrace.WithClientTrace(ctxT(t, 30*time.Second), trace)
		c := s.client(t)
		topic := topicName(t)
		for i := 0; i < 5; i++ {
			if _, err := c.Enqueue(ctx, topic, i, &dq.EnqueueOptions{Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if fresh != 1 || reused != 4 {
			t.Fatalf("5 calls: %d new connections, %d reused (want 1 and 4)", fresh, reused)
		}
	})
}
