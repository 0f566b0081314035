package dq

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Handler handles one job. Return nil to ack it; an error to nack it (the
// attempt counts; the topic's retry policy retries it or, after the last
// attempt, makes it dead); dq.Dead(err) to send it to the dead letters at
// once; dq.RetryLater(d) to give it back, due after d, without counting the
// attempt. A panic is a failed attempt. ctx is cancelled only when the
// worker's grace period ends after a stop.
type Handler func(ctx context.Context, job *Job) error

// WorkerOptions configure a Worker; zero fields take the defaults.
type WorkerOptions struct {
	// Concurrency is the most handlers running at once (default 16).
	Concurrency int
	// Lease per job (default 30 s, at least 300 ms); the leases of running
	// handlers are extended every third of it, in one touch:batch call.
	Lease time.Duration
	// Batch is the most jobs per reserve call (default 100; never more than
	// the free handler slots plus Prefetch).
	Batch int
	// Prefetch is how many jobs are reserved ahead of free handlers, so a
	// handler that finishes finds its next job waiting (default:
	// Concurrency; negative: none). Their leases are extended while they
	// wait; at the stop they are given back.
	Prefetch int
	// Wait is how long a reserve waits for a due job (default 1 s, at most 30 s).
	Wait time.Duration
	// Grace is how long running handlers may take to finish after the stop
	// (default 10 s); then their ctx is cancelled.
	Grace time.Duration
	// Logger gets warnings (reserve failures, refused acks); nil: log.Default().
	Logger *log.Logger
}

// WorkerStats count what a worker did.
type WorkerStats struct {
	// Done: handlers that returned nil (acked).
	Done int64
	// Failed: handlers that returned an error or panicked (nacked).
	Failed int64
	// Dead: handlers that returned dq.Dead (nacked dead).
	Dead int64
	// Retried: handlers that returned dq.RetryLater (released).
	Retried int64
	// Panicked: handlers that panicked (counted in Failed too).
	Panicked int64
	// HandedBack: jobs reserved but not started at the stop, released.
	HandedBack int64
}

// Worker runs handlers for due jobs: it reserves in batches, keeps at most
// Concurrency handlers running, extends the leases of running handlers,
// acks and nacks in batches beside the reserve loop, and stops gracefully.
type Worker struct {
	client   *Client
	opts     WorkerOptions
	handlers map[string]Handler
	log      *log.Logger
	running  int32

	done, failed, dead, retried, panicked, handedBack atomic.Int64
}

// NewWorker returns a worker on client. Register handlers with Handle, then Run.
func NewWorker(client *Client, opts WorkerOptions) *Worker {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 16
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.Lease < 300*time.Millisecond {
		opts.Lease = 300 * time.Millisecond
	}
	if opts.Prefetch == 0 {
		opts.Prefetch = opts.Concurrency
	}
	if opts.Prefetch < 0 {
		opts.Prefetch = 0
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	if opts.Batch > 1000 {
		opts.Batch = 1000
	}
	if opts.Wait <= 0 {
		opts.Wait = time.Second
	}
	if opts.Wait > 30*time.Second {
		opts.Wait = 30 * time.Second
	}
	if opts.Grace <= 0 {
		opts.Grace = 10 * time.Second
	}
	l := opts.Logger
	if l == nil {
		l = log.Default()
	}
	return &Worker{client: client, opts: opts, handlers: map[string]Handler{}, log: l}
}

// Handle runs h for the jobs of topic. Call it before Run.
func (w *Worker) Handle(topic string, h Handler) {
	w.handlers[topic] = h
}

// Stats returns the counts so far (safe while Run runs).
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{
		Done: w.done.Load(), Failed: w.failed.Load(), Dead: w.dead.Load(),
		Retried: w.retried.Load(), Panicked: w.panicked.Load(), HandedBack: w.handedBack.Load(),
	}
}

// detached carries ctx's values but not its cancellation (context.WithoutCancel
// came after Go 1.19).
type detached struct{ parent context.Context }

func (detached) Deadline() (time.Time, bool)         { return time.Time{}, false }
func (detached) Done() <-chan struct{}               { return nil }
func (detached) Err() error                          { return nil }
func (d detached) Value(key interface{}) interface{} { return d.parent.Value(key) }

// Run consumes the topics given to Handle until ctx is cancelled, then stops
// gracefully: it stops reserving, gives back jobs reserved but not started,
// lets running handlers finish within Grace (then cancels their ctx) and
// flushes acks and nacks. dq being down is retried with a backoff (it
// reconnects). Run returns nil after a stop; an error when it cannot start
// or dq refuses the reserve itself (400: a bad topic name).
func (w *Worker) Run(ctx context.Context) error {
	if len(w.handlers) == 0 {
		return errors.New("dq: Worker.Run: no handler (call Handle first)")
	}
	if !atomic.CompareAndSwapInt32(&w.running, 0, 1) {
		return errors.New("dq: Worker.Run: already running")
	}
	defer atomic.StoreInt32(&w.running, 0)

	topics := make([]string, 0, len(w.handlers))
	for t := range w.handlers {
		topics = append(topics, t)
	}
	sort.Strings(topics)

	hctx, hcancel := context.WithCancel(detached{ctx})
	defer hcancel()

	acks := newReporter(w, "ack", func(c context.Context, items []interface{}) ([]error, error) {
		batch := make([]AckItem, len(items))
		for i, it := range items {
			batch[i] = it.(AckItem)
		}
		return w.client.ackBatch(c, batch, retryNever)
	})
	nacks := newReporter(w, "nack", func(c context.Context, items []interface{}) ([]error, error) {
		batch := make([]NackItem, len(items))
		for i, it := range items {
			batch[i] = it.(NackItem)
		}
		res, err := w.client.nackBatch(c, batch, retryNever)
		if err != nil {
			return nil, err
		}
		errs := make([]error, len(res))
		for i, r := range res {
			errs[i] = r.Err
		}
		return errs, nil
	})

	leases := &inFlight{items: map[string]TouchItem{}}
	keeperStop := make(chan struct{})
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		w.keepLeases(leases, keeperStop)
	}()

	// held counts the jobs this worker holds: running, or reserved ahead
	// (Prefetch) and waiting in queue for a free handler.
	held := make(chan struct{}, w.opts.Concurrency+w.opts.Prefetch)
	queue := make(chan *Job, w.opts.Concurrency+w.opts.Prefetch)
	var wg sync.WaitGroup
	for i := 0; i < w.opts.Concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range queue {
				if ctx.Err() != nil {
					// Stopping: a job not started is given back.
					w.handBack(job, leases)
				} else {
					w.runJob(hctx, job, leases, acks, nacks)
				}
				<-held
			}
		}()
	}
	failures := 0
	var runErr error
	ropts := &ReserveOptions{Lease: w.opts.Lease, Wait: w.opts.Wait}
reserving:
	for ctx.Err() == nil {
		select {
		case held <- struct{}{}:
		case <-ctx.Done():
			break reserving
		}
		n := 1
	fill:
		for n < w.opts.Batch {
			select {
			case held <- struct{}{}:
				n++
			default:
				break fill
			}
		}
		// A reserve in flight is not cancelled by the stop: what it returns
		// is given back, not stranded until its lease ends.
		rctx, rcancel := context.WithTimeout(context.Background(), w.opts.Wait+15*time.Second)
		ropts.Max = n
		jobs, err := w.client.reserve(rctx, topics, ropts, retryNever)
		rcancel()
		if err != nil {
			for i := 0; i < n; i++ {
				<-held
			}
			var apiErr *Error
			if errors.As(err, &apiErr) && apiErr.Status == 400 {
				// A bad topic name: retrying cannot help.
				runErr = fmt.Errorf("dq: Worker.Run: reserve refused: %w", err)
				break reserving
			}
			failures++
			if failures == 1 || failures%30 == 0 {
				w.log.Printf("dq worker: reserve failed (%d in a row), retrying: %v", failures, err)
			}
			wait := time.Duration(failures) * 100 * time.Millisecond
			if wait > time.Second {
				wait = time.Second
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		if failures > 0 {
			w.log.Printf("dq worker: reserve works again after %d failures", failures)
		}
		failures = 0
		for i, job := range jobs {
			if i >= n {
				w.handBack(job, nil) // never more than asked for; to be safe
				continue
			}
			// Its lease is kept from now on, while it waits and while it runs.
			leases.add(TouchItem{Topic: job.Topic, ID: job.ID, Token: job.Token, LeaseMs: w.opts.Lease.Milliseconds()})
			queue <- job
		}
		for i := len(jobs); i < n; i++ {
			<-held
		}
	}
	// Jobs reserved but not started are given back at once (idle runners
	// do the same with what they take from the queue meanwhile).
drain:
	for {
		select {
		case job := <-queue:
			w.handBack(job, leases)
			<-held
		default:
			break drain
		}
	}
	close(queue)

	// The stop: running handlers get the grace period, then their ctx ends.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	grace := time.NewTimer(w.opts.Grace)
	select {
	case <-finished:
		grace.Stop()
	case <-grace.C:
		w.log.Printf("dq worker: handlers still running after the grace period (%v); cancelling them", w.opts.Grace)
		hcancel()
		t := time.NewTimer(2 * time.Second)
		select {
		case <-finished:
		case <-t.C:
			w.log.Printf("dq worker: handlers ignore their ctx; their jobs come back when their leases end")
		}
		t.Stop()
	}
	close(keeperStop)
	<-keeperDone
	acks.close()
	nacks.close()
	return runErr
}

// handBack releases a job reserved but not started (the attempt is not counted).
func (w *Worker) handBack(job *Job, leases *inFlight) {
	if leases != nil {
		defer leases.remove(job.Token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.client.Release(ctx, job.Topic, job.ID, job.Token, 0); err != nil {
		w.log.Printf("dq worker: cannot give back %s/%s at the stop (it comes back when its lease ends): %v", job.Topic, job.ID, err)
		return
	}
	w.handedBack.Add(1)
}

func (w *Worker) runJob(ctx context.Context, job *Job, leases *inFlight, acks, nacks *reporter) {
	h := w.handlers[job.Topic]
	err := w.call(ctx, h, job)
	leases.remove(job.Token)

	if err == nil {
		w.done.Add(1)
		acks.add(AckItem{Topic: job.Topic, ID: job.ID, Token: job.Token})
		return
	}
	if d, ok := RetryLaterDelay(err); ok {
		w.retried.Add(1)
		w.release(job, d)
		return
	}
	if IsDead(err) {
		w.dead.Add(1)
		nacks.add(NackItem{Topic: job.Topic, ID: job.ID, Token: job.Token, Error: truncate(err.Error()), Dead: true})
		return
	}
	if ctx.Err() != nil {
		// Cancelled at the end of the grace period: give the job back
		// without counting the attempt.
		w.release(job, 0)
		return
	}
	w.failed.Add(1)
	nacks.add(NackItem{Topic: job.Topic, ID: job.ID, Token: job.Token, Error: truncate(err.Error())})
}

func (w *Worker) release(job *Job, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.client.Release(ctx, job.Topic, job.ID, job.Token, d); err != nil {
		w.log.Printf("dq worker: cannot release %s/%s (it comes back when its lease ends): %v", job.Topic, job.ID, err)
	}
}

// call runs the handler; a panic becomes an error.
func (w *Worker) call(ctx context.Context, h Handler, job *Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			w.panicked.Add(1)
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h(ctx, job)
}

func truncate(s string) string {
	if len(s) > 4000 {
		return s[:4000]
	}
	return s
}

// inFlight holds the leases of the jobs whose handlers run, by token.
type inFlight struct {
	mu    sync.Mutex
	items map[string]TouchItem
}

func (f *inFlight) add(t TouchItem) {
	f.mu.Lock()
	f.items[t.Token] = t
	f.mu.Unlock()
}

func (f *inFlight) remove(token string) {
	f.mu.Lock()
	delete(f.items, token)
	f.mu.Unlock()
}

func (f *inFlight) has(token string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.items[token]
	return ok
}

func (f *inFlight) snapshot() []TouchItem {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]TouchItem, 0, len(f.items))
	for _, t := range f.items {
		out = append(out, t)
	}
	return out
}

// keepLeases extends every running job's lease every third of the lease,
// in one touch:batch call (per 1000 jobs), until stop.
func (w *Worker) keepLeases(f *inFlight, stop <-chan struct{}) {
	every := w.opts.Lease / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		items := f.snapshot()
		for len(items) > 0 {
			chunk := items
			if len(chunk) > 1000 {
				chunk = chunk[:1000]
			}
			items = items[len(chunk):]
			ctx, cancel := context.WithTimeout(context.Background(), every)
			res, err := w.client.TouchBatch(ctx, chunk)
			cancel()
			if err != nil {
				w.log.Printf("dq worker: cannot extend the leases of %d running jobs: %v", len(chunk), err)
				continue
			}
			for i, r := range res {
				if r.Err != nil && i < len(chunk) && f.has(chunk[i].Token) {
					w.log.Printf("dq worker: cannot extend the lease of %s/%s: %v", chunk[i].Topic, chunk[i].ID, r.Err)
				}
			}
		}
	}
}

// reporter collects acks (or nacks) and sends them in batches from its own
// goroutine, retrying while dq is unreachable.
type reporter struct {
	w       *Worker
	verb    string
	send    func(context.Context, []interface{}) ([]error, error)
	mu      sync.Mutex
	pending []interface{}
	closed  bool
	notify  chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func newReporter(w *Worker, verb string, send func(context.Context, []interface{}) ([]error, error)) *reporter {
	r := &reporter{w: w, verb: verb, send: send, notify: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *reporter) add(item interface{}) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.w.log.Printf("dq worker: %s after the stop dropped (the job comes back when its lease ends): %+v", r.verb, item)
		return
	}
	r.pending = append(r.pending, item)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// close flushes what is pending (within 15 s) and stops the loop.
func (r *reporter) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.done
}

func (r *reporter) take(max int) []interface{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.pending)
	if n > max {
		n = max
	}
	batch := make([]interface{}, n)
	copy(batch, r.pending[:n])
	r.pending = r.pending[n:]
	if len(r.pending) == 0 {
		r.pending = nil
	}
	return batch
}

func (r *reporter) loop() {
	defer close(r.done)
	stopping := false
	var deadline time.Time
	for {
		if !stopping {
			select {
			case <-r.notify:
				// Let a few more arrive, to send them together.
				time.Sleep(2 * time.Millisecond)
			case <-r.stop:
				stopping = true
				deadline = time.Now().Add(15 * time.Second)
			}
		}
		for {
			batch := r.take(1000)
			if len(batch) == 0 {
				break
			}
			r.flush(batch, stopping, deadline)
			if !stopping {
				select {
				case <-r.stop:
					stopping = true
					deadline = time.Now().Add(15 * time.Second)
				default:
				}
			}
		}
		if stopping {
			return
		}
	}
}

// flush sends one batch, retrying transient failures (dq down or
// restarting) for up to 30 s, or until the deadline when stopping.
func (r *reporter) flush(batch []interface{}, stopping bool, deadline time.Time) {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs, err := r.send(ctx, batch)
		cancel()
		if err == nil {
			for i, e := range errs {
				if e != nil && i < len(batch) {
					r.w.log.Printf("dq worker: %s refused (lease lost or job cancelled): %+v: %v", r.verb, batch[i], e)
				}
			}
			return
		}
		if !transient(err) {
			r.w.log.Printf("dq worker: %d %ss failed; those jobs come back when their leases end: %v", len(batch), r.verb, err)
			return
		}
		wait := backoff(attempt)
		if time.Since(start)+wait > 30*time.Second || (stopping && time.Now().Add(wait).After(deadline)) {
			r.w.log.Printf("dq worker: %d %ss failed; those jobs come back when their leases end: %v", len(batch), r.verb, err)
			return
		}
		if attempt == 0 {
			r.w.log.Printf("dq worker: %s batch failed, retrying: %v", r.verb, err)
		}
		time.Sleep(wait)
	}
}

// transient: dq unreachable, or 503 (store unavailable, restarting).
func transient(err error) bool {
	var te *TransportError
	if errors.As(err, &te) {
		return true
	}
	var e *Error
	return errors.As(err, &e) && (e.Status == 503 || e.Status == 429)
}
