package dq

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Bytes is a job body of raw bytes: sent as body_base64 and given back as
// Job.BodyBytes. A plain []byte body is sent the same way.
type Bytes []byte

// Marshal encodes v as a JSON body (json.Marshal); a json.RawMessage body
// is sent verbatim instead, so you rarely need this.
func Marshal(v interface{}) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	return json.RawMessage(b), err
}

// MustMarshal is Marshal that panics on error (for literals in tests and examples).
func MustMarshal(v interface{}) json.RawMessage {
	b, err := Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// RetryPolicy is a retry wait policy: set exactly one of the fields.
type RetryPolicy struct {
	Exponential *ExponentialRetry `json:"exponential,omitempty"`
	FixedMs     *int64            `json:"fixed_ms,omitempty"`
	DelaysMs    []int64           `json:"delays_ms,omitempty"`
}

// ExponentialRetry waits InitialMs × Factor^(n−1) after failed attempt n,
// capped at MaxMs, spread by ±Jitter.
type ExponentialRetry struct {
	InitialMs int64    `json:"initial_ms"`
	Factor    float64  `json:"factor"`
	MaxMs     int64    `json:"max_ms"`
	Jitter    *float64 `json:"jitter,omitempty"`
}

// EnqueueOptions are the optional fields of an enqueue (all may be left zero).
type EnqueueOptions struct {
	// ID is the idempotency key; dq generates a UUIDv7 when empty.
	ID string
	// Delay: due this long from now (delay_ms). Not with DueAt. Zero: the
	// topic's default delay (0 unless configured).
	Delay time.Duration
	// DueAt: due at this time (due_at_ms; in the past means now). Not with Delay.
	DueAt time.Time
	// Priority: lower first, default 1024 (nil: the default).
	Priority *uint32
	// MaxAttempts overrides the topic's (0: the topic's).
	MaxAttempts int
	// Lease overrides the topic's lease for this job (0: the topic's).
	Lease time.Duration
	// Retry overrides the topic's retry policy for this job.
	Retry *RetryPolicy
	// Replace rewrites a waiting job with the same ID (body, due time, all).
	Replace bool
	// DedupWindow: for this long after the job ended, enqueueing its ID
	// again stores nothing (dedup_ms; 0: the topic's).
	DedupWindow time.Duration
	// Key is the flow-control key (a customer, a tenant).
	Key string
}

type enqueueFields struct {
	ID          string       `json:"id,omitempty"`
	BodyBase64  *string      `json:"body_base64,omitempty"`
	DelayMs     *int64       `json:"delay_ms,omitempty"`
	DueAtMs     *int64       `json:"due_at_ms,omitempty"`
	Priority    *uint32      `json:"priority,omitempty"`
	MaxAttempts int          `json:"max_attempts,omitempty"`
	LeaseMs     int64        `json:"lease_ms,omitempty"`
	Retry       *RetryPolicy `json:"retry,omitempty"`
	Replace     bool         `json:"replace,omitempty"`
	DedupMs     int64        `json:"dedup_ms,omitempty"`
	Key         string       `json:"key,omitempty"`
}

// encodeEnqueue builds an enqueue request. A json.RawMessage body is
// spliced in as it is, so its text (spacing, key order, number spelling)
// reaches dq unchanged; json.Marshal would compact and re-escape it.
func encodeEnqueue(body interface{}, o *EnqueueOptions) ([]byte, error) {
	var f enqueueFields
	if o != nil {
		f.ID = o.ID
		if o.Delay != 0 {
			ms := o.Delay.Milliseconds()
			f.DelayMs = &ms
		}
		if !o.DueAt.IsZero() {
			ms := o.DueAt.UnixMilli()
			f.DueAtMs = &ms
		}
		f.Priority = o.Priority
		f.MaxAttempts = o.MaxAttempts
		f.LeaseMs = o.Lease.Milliseconds()
		f.Retry = o.Retry
		f.Replace = o.Replace
		f.DedupMs = o.DedupWindow.Milliseconds()
		f.Key = o.Key
	}
	var raw []byte
	switch b := body.(type) {
	case nil:
	case json.RawMessage:
		if !json.Valid(b) {
			return nil, errors.New("dq: body is not valid JSON")
		}
		raw = bytes.TrimSpace(b)
	case Bytes:
		s := base64.StdEncoding.EncodeToString(b)
		f.BodyBase64 = &s
	case []byte:
		s := base64.StdEncoding.EncodeToString(b)
		f.BodyBase64 = &s
	default:
		m, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("dq: cannot encode body: %w", err)
		}
		raw = m
	}
	head, err := json.Marshal(&f)
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return head, nil
	}
	out := make([]byte, 0, len(head)+len(raw)+10)
	out = append(out, head[:len(head)-1]...)
	if len(head) > 2 {
		out = append(out, ',')
	}
	out = append(out, `"body":`...)
	out = append(out, raw...)
	out = append(out, '}')
	return out, nil
}

// Enqueued is the answer to an enqueue.
type Enqueued struct {
	ID string `json:"id"`
	// Created is false when a job with this ID existed (nothing changed) or
	// was replaced.
	Created  bool `json:"created"`
	Replaced bool `json:"replaced"`
	// Deduplicated: a job with this ID ended within its dedup window;
	// nothing was stored (DueAtMs and State are then zero).
	Deduplicated bool   `json:"deduplicated"`
	DueAtMs      int64  `json:"due_at_ms"`
	State        string `json:"state"`
}

// DueAt is DueAtMs as a time.
func (e *Enqueued) DueAt() time.Time { return time.UnixMilli(e.DueAtMs) }

// Enqueue adds a job to topic. body: a json.RawMessage is sent verbatim
// (and comes back byte for byte); dq.Bytes or []byte is sent as bytes
// (body_base64); nil is JSON null; anything else is encoded with
// json.Marshal. opts may be nil.
func (c *Client) Enqueue(ctx context.Context, topic string, body interface{}, opts *EnqueueOptions) (*Enqueued, error) {
	req, err := encodeEnqueue(body, opts)
	if err != nil {
		return nil, err
	}
	mode := retryUnsent
	if opts != nil && opts.ID != "" {
		mode = retryIdempotent // enqueue with an id is idempotent
	}
	var out Enqueued
	if err := c.call(ctx, "POST", "/v1/topics/"+PathEscape(topic)+"/jobs", req, mode, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// NewJob is one job of EnqueueBatch: its body (as Enqueue takes it) and options.
type NewJob struct {
	Body interface{}
	EnqueueOptions
}

// BatchResult is the outcome of one item of a batch: Err is a *dq.Error
// for an item dq refused (and skipped).
type BatchResult struct {
	Enqueued *Enqueued
	Err      error
}

// EnqueueBatch adds 1–1000 jobs to topic in one atomic step; a result per
// job, in order. The error is for the call as a whole.
func (c *Client) EnqueueBatch(ctx context.Context, topic string, jobs []NewJob) ([]BatchResult, error) {
	var buf bytes.Buffer
	buf.WriteString(`{"jobs":[`)
	allIDs := len(jobs) > 0
	for i := range jobs {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := encodeEnqueue(jobs[i].Body, &jobs[i].EnqueueOptions)
		if err != nil {
			return nil, fmt.Errorf("jobs[%d]: %w", i, err)
		}
		buf.Write(b)
		if jobs[i].ID == "" {
			allIDs = false
		}
	}
	buf.WriteString("]}")
	mode := retryUnsent
	if allIDs {
		mode = retryIdempotent
	}
	var out struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := c.call(ctx, "POST", "/v1/topics/"+PathEscape(topic)+"/jobs:batch", buf.Bytes(), mode, &out); err != nil {
		return nil, err
	}
	res := make([]BatchResult, len(out.Results))
	for i, r := range out.Results {
		if isErrorItem(r) {
			res[i].Err = itemError(r)
			continue
		}
		var e Enqueued
		if err := json.Unmarshal(r, &e); err != nil {
			res[i].Err = &TransportError{Op: "POST jobs:batch", Err: err}
			continue
		}
		res[i].Enqueued = &e
	}
	return res, nil
}

func isErrorItem(r json.RawMessage) bool {
	var probe struct {
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal(r, &probe) == nil && len(probe.Error) > 0 && string(probe.Error) != "null"
}

// JobInfo is a job as GET job and the dead-letter list show it.
// AttemptError is one failed attempt of a job: which hand-out, when (Unix
// ms) and why (a nack's error, or "lease expired").
type AttemptError struct {
	Attempt int    `json:"attempt"`
	AtMs    int64  `json:"at_ms"`
	Error   string `json:"error"`
}

type JobInfo struct {
	Topic       string  `json:"topic"`
	ID          string  `json:"id"`
	State       string  `json:"state"` // scheduled, ready, reserved or dead
	DueAtMs     int64   `json:"due_at_ms"`
	Priority    uint32  `json:"priority"`
	Attempts    int     `json:"attempts"`
	MaxAttempts int     `json:"max_attempts"`
	LeaseMs     int64   `json:"lease_ms"`
	LastError   *string `json:"last_error"`
	// Errors are its last failed attempts (at most ten), oldest first.
	Errors          []AttemptError  `json:"errors,omitempty"`
	CreatedAtMs     int64           `json:"created_at_ms"`
	LeaseDeadlineMs *int64          `json:"lease_deadline_ms"`
	DiedAtMs        *int64          `json:"died_at_ms"`
	Key             string          `json:"key,omitempty"`
	Body            json.RawMessage `json:"body"`
	BodyBase64      string          `json:"body_base64,omitempty"`
}

// DueAt is DueAtMs as a time.
func (j *JobInfo) DueAt() time.Time { return time.UnixMilli(j.DueAtMs) }

// BodyBytes is the body of a job enqueued as bytes (nil for a JSON body).
func (j *JobInfo) BodyBytes() []byte { return decodeB64(j.BodyBase64) }

// Decode unmarshals the JSON body into v.
func (j *JobInfo) Decode(v interface{}) error { return json.Unmarshal(j.Body, v) }

func decodeB64(s string) []byte {
	if s == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil
	}
	return b
}

// Get reads a job. A missing job is a *dq.Error with Code "job_not_found".
func (c *Client) Get(ctx context.Context, topic, id string) (*JobInfo, error) {
	var out JobInfo
	if err := c.call(ctx, "GET", c.jobPath(topic, id, ""), nil, retryIdempotent, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Cancel deletes a job in any state; it returns the state it had.
func (c *Client) Cancel(ctx context.Context, topic, id string) (string, error) {
	var out struct {
		State string `json:"state"`
	}
	if err := c.call(ctx, "DELETE", c.jobPath(topic, id, ""), nil, retryUnsent, &out); err != nil {
		return "", err
	}
	return out.State, nil
}

// Reschedule moves a waiting job to a new due time (in the past: due now);
// it returns the due time stored. A reserved or dead job: "not_in_state".
func (c *Client) Reschedule(ctx context.Context, topic, id string, dueAt time.Time) (time.Time, error) {
	return c.reschedule(ctx, topic, id, map[string]int64{"due_at_ms": dueAt.UnixMilli()})
}

// RescheduleIn moves a waiting job to be due delay from now.
func (c *Client) RescheduleIn(ctx context.Context, topic, id string, delay time.Duration) (time.Time, error) {
	return c.reschedule(ctx, topic, id, map[string]int64{"delay_ms": delay.Milliseconds()})
}

func (c *Client) reschedule(ctx context.Context, topic, id string, body map[string]int64) (time.Time, error) {
	var out struct {
		DueAtMs int64 `json:"due_at_ms"`
	}
	if err := c.call(ctx, "PATCH", c.jobPath(topic, id, ""), mustJSON(body), retryIdempotent, &out); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(out.DueAtMs), nil
}
