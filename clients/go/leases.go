package dq

import (
	"context"
	"encoding/json"
	"time"
)

// Job is a leased job, as reserve hands it out (and a Worker's handler gets it).
type Job struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	// Token is the lease: ack, nack, touch and release need it.
	Token string `json:"token"`
	// Attempt is which hand-out this is (1 for the first).
	Attempt         int    `json:"attempt"`
	DueAtMs         int64  `json:"due_at_ms"`
	LeaseDeadlineMs int64  `json:"lease_deadline_ms"`
	Priority        uint32 `json:"priority"`
	// Body is the JSON body, the very text that was enqueued ("null" for a
	// body of bytes).
	Body json.RawMessage `json:"body"`
	// BodyBase64 is set for a body enqueued as bytes; BodyBytes decodes it.
	BodyBase64 string `json:"body_base64,omitempty"`
}

// DueAt is the job's due time.
func (j *Job) DueAt() time.Time { return time.UnixMilli(j.DueAtMs) }

// LeaseDeadline is when the lease ends unless extended.
func (j *Job) LeaseDeadline() time.Time { return time.UnixMilli(j.LeaseDeadlineMs) }

// Decode unmarshals the JSON body into v.
func (j *Job) Decode(v interface{}) error { return json.Unmarshal(j.Body, v) }

// BodyBytes is the body of a job enqueued as bytes (nil for a JSON body).
func (j *Job) BodyBytes() []byte { return decodeB64(j.BodyBase64) }

// ReserveOptions are the options of Reserve.
type ReserveOptions struct {
	// Max jobs to lease (1–1000; 0: 1).
	Max int
	// Lease length (0: the job's, then the topic's).
	Lease time.Duration
	// Wait up to this long (at most 30 s) for a job to become due (0: no wait).
	Wait time.Duration
}

type reserveRequest struct {
	Topics  []string `json:"topics"`
	Max     int      `json:"max,omitempty"`
	LeaseMs int64    `json:"lease_ms,omitempty"`
	WaitMs  int64    `json:"wait_ms,omitempty"`
}

// Reserve leases up to opts.Max due jobs of the topics, most urgent first,
// waiting up to opts.Wait for one to become due. opts may be nil.
func (c *Client) Reserve(ctx context.Context, topics []string, opts *ReserveOptions) ([]*Job, error) {
	return c.reserve(ctx, topics, opts, retryIdempotent)
}

func (c *Client) reserve(ctx context.Context, topics []string, opts *ReserveOptions, mode retry) ([]*Job, error) {
	r := reserveRequest{Topics: topics}
	if r.Topics == nil {
		r.Topics = []string{}
	}
	if opts != nil {
		r.Max = opts.Max
		r.LeaseMs = opts.Lease.Milliseconds()
		r.WaitMs = opts.Wait.Milliseconds()
	}
	var out struct {
		Jobs []*Job `json:"jobs"`
	}
	if err := c.call(ctx, "POST", "/v1/reserve", mustJSON(r), mode, &out); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

type tokenBody struct {
	Token string `json:"token"`
}

// Ack completes a leased job (it is deleted). A stale token: "lease_mismatch";
// a cancelled job: "job_not_found".
func (c *Client) Ack(ctx context.Context, topic, id, token string) error {
	return c.call(ctx, "POST", c.jobPath(topic, id, "ack"), mustJSON(tokenBody{token}), retryUnsent, nil)
}

// Nacked is the answer to a nack: the job's state ("scheduled" with its
// new due time, or "dead").
type Nacked struct {
	ID      string `json:"id,omitempty"`
	State   string `json:"state"`
	DueAtMs int64  `json:"due_at_ms,omitempty"`
}

// NackOptions are the options of Nack.
type NackOptions struct {
	// RetryIn: due again after this (0: the job's/topic's retry wait).
	RetryIn time.Duration
	// Dead: to the dead letters at once, whatever attempts are left.
	Dead bool
}

type nackBody struct {
	Token     string `json:"token"`
	Error     string `json:"error,omitempty"`
	RetryInMs *int64 `json:"retry_in_ms,omitempty"`
	Dead      bool   `json:"dead,omitempty"`
}

// Nack fails the attempt with an error message: the job is retried after
// the retry wait (or opts.RetryIn), or dead after its last attempt, or dead
// at once with opts.Dead. opts may be nil.
func (c *Client) Nack(ctx context.Context, topic, id, token, errMsg string, opts *NackOptions) (*Nacked, error) {
	b := nackBody{Token: token, Error: errMsg}
	if opts != nil {
		if opts.RetryIn > 0 {
			ms := opts.RetryIn.Milliseconds()
			b.RetryInMs = &ms
		}
		b.Dead = opts.Dead
	}
	var out Nacked
	if err := c.call(ctx, "POST", c.jobPath(topic, id, "nack"), mustJSON(b), retryUnsent, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// NackDead sends the job to the dead letters at once (a permanent failure).
func (c *Client) NackDead(ctx context.Context, topic, id, token, errMsg string) error {
	_, err := c.Nack(ctx, topic, id, token, errMsg, &NackOptions{Dead: true})
	return err
}

// Release gives the job back without counting the attempt; it is due again
// after delay. It returns the new due time.
func (c *Client) Release(ctx context.Context, topic, id, token string, delay time.Duration) (time.Time, error) {
	b := struct {
		Token   string `json:"token"`
		DelayMs int64  `json:"delay_ms"`
	}{token, delay.Milliseconds()}
	var out struct {
		DueAtMs int64 `json:"due_at_ms"`
	}
	if err := c.call(ctx, "POST", c.jobPath(topic, id, "release"), mustJSON(b), retryUnsent, &out); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(out.DueAtMs), nil
}

// Touch extends a lease to now + lease (0: the job's, then the topic's
// lease); it returns the new deadline.
func (c *Client) Touch(ctx context.Context, topic, id, token string, lease time.Duration) (time.Time, error) {
	b := struct {
		Token   string `json:"token"`
		LeaseMs int64  `json:"lease_ms,omitempty"`
	}{token, lease.Milliseconds()}
	var out struct {
		LeaseDeadlineMs int64 `json:"lease_deadline_ms"`
	}
	if err := c.call(ctx, "POST", c.jobPath(topic, id, "touch"), mustJSON(b), retryIdempotent, &out); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(out.LeaseDeadlineMs), nil
}

// AckItem is one ack of AckBatch.
type AckItem struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	Token string `json:"token"`
}

// NackItem is one nack of NackBatch.
type NackItem struct {
	Topic     string  `json:"topic"`
	ID        string  `json:"id"`
	Token     string  `json:"token"`
	Error     string  `json:"error,omitempty"`
	RetryInMs *int64  `json:"retry_in_ms,omitempty"`
	Dead      bool    `json:"dead,omitempty"`
	Priority  *uint32 `json:"priority,omitempty"`
}

// TouchItem is one lease extension of TouchBatch.
type TouchItem struct {
	Topic   string `json:"topic"`
	ID      string `json:"id"`
	Token   string `json:"token"`
	LeaseMs int64  `json:"lease_ms,omitempty"`
}

// AckBatch acks up to 1000 jobs in one call; an error per item (nil when
// acked), in order. The returned error is for the call as a whole.
func (c *Client) AckBatch(ctx context.Context, acks []AckItem) ([]error, error) {
	return c.ackBatch(ctx, acks, retryUnsent)
}

func (c *Client) ackBatch(ctx context.Context, acks []AckItem, mode retry) ([]error, error) {
	if acks == nil {
		acks = []AckItem{}
	}
	var out struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := c.call(ctx, "POST", "/v1/ack:batch", mustJSON(map[string]interface{}{"acks": acks}), mode, &out); err != nil {
		return nil, err
	}
	errs := make([]error, len(out.Results))
	for i, r := range out.Results {
		if isErrorItem(r) {
			errs[i] = itemError(r)
		}
	}
	return errs, nil
}

// NackResult is the outcome of one item of NackBatch.
type NackResult struct {
	Nacked *Nacked
	Err    error
}

// NackBatch nacks up to 1000 jobs in one call; a result per item, in order.
func (c *Client) NackBatch(ctx context.Context, nacks []NackItem) ([]NackResult, error) {
	return c.nackBatch(ctx, nacks, retryUnsent)
}

func (c *Client) nackBatch(ctx context.Context, nacks []NackItem, mode retry) ([]NackResult, error) {
	if nacks == nil {
		nacks = []NackItem{}
	}
	var out struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := c.call(ctx, "POST", "/v1/nack:batch", mustJSON(map[string]interface{}{"nacks": nacks}), mode, &out); err != nil {
		return nil, err
	}
	res := make([]NackResult, len(out.Results))
	for i, r := range out.Results {
		if isErrorItem(r) {
			res[i].Err = itemError(r)
			continue
		}
		var n Nacked
		if err := json.Unmarshal(r, &n); err != nil {
			res[i].Err = &TransportError{Op: "POST /v1/nack:batch", Err: err}
			continue
		}
		if i < len(nacks) {
			n.ID = nacks[i].ID
		}
		res[i].Nacked = &n
	}
	return res, nil
}

// TouchResult is the outcome of one item of TouchBatch.
type TouchResult struct {
	LeaseDeadline time.Time
	Err           error
}

// TouchBatch extends up to 1000 leases in one call; a result per item, in order.
func (c *Client) TouchBatch(ctx context.Context, touches []TouchItem) ([]TouchResult, error) {
	if touches == nil {
		touches = []TouchItem{}
	}
	var out struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := c.call(ctx, "POST", "/v1/touch:batch", mustJSON(map[string]interface{}{"touches": touches}), retryIdempotent, &out); err != nil {
		return nil, err
	}
	res := make([]TouchResult, len(out.Results))
	for i, r := range out.Results {
		if isErrorItem(r) {
			res[i].Err = itemError(r)
			continue
		}
		var t struct {
			LeaseDeadlineMs int64 `json:"lease_deadline_ms"`
		}
		_ = json.Unmarshal(r, &t)
		res[i].LeaseDeadline = time.UnixMilli(t.LeaseDeadlineMs)
	}
	return res, nil
}
