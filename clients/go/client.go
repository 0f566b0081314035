// Package dq is the Go client and worker of dq, the delay-queue service.
//
//	client, err := dq.NewClient("http://127.0.0.1:7070")
//	_, err = client.Enqueue(ctx, "orders", map[string]int{"order": 42},
//		&dq.EnqueueOptions{ID: "order-42", Delay: 30 * time.Minute})
//
//	w := dq.NewWorker(client, dq.WorkerOptions{Concurrency: 4})
//	w.Handle("orders", func(ctx context.Context, job *dq.Job) error { ... })
//	err = w.Run(ctx) // until ctx is cancelled, then a graceful stop
//
// Standard library only.
package dq

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Version of this client, sent in the User-Agent.
const Version = "0.1.0"

// Client is a client of one dq server. It is safe for concurrent use and
// keeps connections alive (pooled); make one and share it.
type Client struct {
	base        string
	http        *http.Client
	apiKey      string
	retryBudget time.Duration
	userAgent   string
}

type config struct {
	apiKey      string
	httpClient  *http.Client
	timeout     time.Duration
	tlsConfig   *tls.Config
	retryBudget time.Duration
}

// Option configures a Client (NewClient).
type Option func(*config)

// WithAPIKey sends "Authorization: Bearer <key>" with every call: an API
// key (dqk_…) or the server's admin_token.
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = key } }

// WithHTTPClient uses your own *http.Client (transport, proxies, timeouts).
// WithTimeout and WithTLSConfig do not change it.
func WithHTTPClient(h *http.Client) Option { return func(c *config) { c.httpClient = h } }

// WithTimeout is the limit of one HTTP request (default 60 s; it must be
// longer than the longest reserve wait, 30 s).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithTLSConfig sets the TLS configuration for an https:// server (e.g. a
// RootCAs pool holding a private certificate authority).
func WithTLSConfig(t *tls.Config) Option { return func(c *config) { c.tlsConfig = t } }

// WithRetryBudget bounds how long a call is retried on 503 answers with
// Retry-After (store unavailable) and on connection errors where retrying is
// safe (default 30 s; 0 turns retries off).
func WithRetryBudget(d time.Duration) Option { return func(c *config) { c.retryBudget = d } }

// NewClient returns a client of the dq server at url
// (e.g. "http://127.0.0.1:7070").
func NewClient(url string, opts ...Option) (*Client, error) {
	cfg := config{timeout: 60 * time.Second, retryBudget: 30 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	url = strings.TrimRight(strings.TrimSpace(url), "/")
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("dq: NewClient: url %q must start with http:// or https://", url)
	}
	h := cfg.httpClient
	if h == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 256
		tr.MaxIdleConnsPerHost = 64
		// Below dq's keep-alive idle limit (30 s), so a pooled connection is
		// not reused just as the server closes it.
		tr.IdleConnTimeout = 20 * time.Second
		if cfg.tlsConfig != nil {
			tr.TLSClientConfig = cfg.tlsConfig
		}
		h = &http.Client{Transport: tr, Timeout: cfg.timeout}
	}
	return &Client{
		base:        url,
		http:        h,
		apiKey:      cfg.apiKey,
		retryBudget: cfg.retryBudget,
		userAgent:   "dq-go/" + Version,
	}, nil
}

// URL is the server's base URL.
func (c *Client) URL() string { return c.base }

// PathEscape percent-encodes one path segment (a topic, a job id) the way
// dq expects: everything but A-Z a-z 0-9 - . _ ~ : is encoded ("/" too).
func PathEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ('a' <= ch && ch <= 'z') || ('A' <= ch && ch <= 'Z') || ('0' <= ch && ch <= '9') ||
			ch == '-' || ch == '.' || ch == '_' || ch == '~' || ch == ':' {
			b.WriteByte(ch)
		} else {
			fmt.Fprintf(&b, "%%%02X", ch)
		}
	}
	return b.String()
}

func (c *Client) jobPath(topic, id, action string) string {
	p := "/v1/topics/" + PathEscape(topic) + "/jobs/" + PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

// retry says which failures a call may be repeated on.
type retry int

const (
	// retryUnsent: only 503 with Retry-After and failures to connect (nothing reached dq).
	retryUnsent retry = iota
	// retryNever: one try (the worker's reserve loop backs off itself).
	retryNever
	// retryIdempotent: also broken connections and timeouts (repeating is harmless).
	retryIdempotent
)

// call sends one request and decodes a 2xx reply into out (when not nil).
// body is JSON already encoded (nil: no body).
func (c *Client) call(ctx context.Context, method, path string, body []byte, mode retry, out interface{}) error {
	op := method + " " + path
	start := time.Now()
	attempt := 0
	for {
		status, data, retryAfter, err := c.once(ctx, method, path, body)
		var wait time.Duration
		if mode == retryNever {
			if err != nil {
				return &TransportError{Op: op, Err: err}
			}
			if status < 200 || status >= 300 {
				return parseError(status, data, retryAfter)
			}
		}
		if err != nil {
			terr := &TransportError{Op: op, Err: err}
			if ctx.Err() != nil || !(mode == retryIdempotent || isDialError(err)) {
				return terr
			}
			wait = backoff(attempt)
			if time.Since(start)+wait > c.retryBudget {
				return terr
			}
			err = terr
		} else if status >= 200 && status < 300 {
			if out == nil || len(data) == 0 {
				return nil
			}
			if err := json.Unmarshal(data, out); err != nil {
				return &TransportError{Op: op, Err: fmt.Errorf("unexpected reply: %w", err)}
			}
			return nil
		} else {
			apiErr := parseError(status, data, retryAfter)
			if status != 503 || retryAfter <= 0 {
				return apiErr
			}
			wait = retryAfter
			if wait > 5*time.Second {
				wait = 5 * time.Second
			}
			if time.Since(start)+wait > c.retryBudget {
				return apiErr
			}
			err = apiErr
		}
		attempt++
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond << uint(attempt)
	if attempt > 4 || d > 2*time.Second {
		d = 2 * time.Second
	}
	return d
}

func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return false
}

func (c *Client) once(ctx context.Context, method, path string, body []byte) (int, []byte, time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil, 0, err
	}
	var ra time.Duration
	if v := res.Header.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && s >= 0 {
			ra = time.Duration(s * float64(time.Second))
			if ra == 0 {
				ra = time.Millisecond
			}
		}
	}
	return res.StatusCode, data, ra, nil
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func parseError(status int, data []byte, retryAfter time.Duration) *Error {
	var b errorBody
	e := &Error{Status: status, RetryAfter: retryAfter}
	if json.Unmarshal(data, &b) == nil && b.Error.Code != "" {
		e.Code, e.Message = b.Error.Code, b.Error.Message
	} else {
		e.Message = strings.TrimSpace(string(data))
		if e.Message == "" {
			e.Message = http.StatusText(status)
		}
	}
	return e
}

// itemError is a per-item refusal of a batch, as the error the single call
// would have answered.
func itemError(raw json.RawMessage) *Error {
	var b errorBody
	_ = json.Unmarshal(raw, &b)
	status := 400
	switch code := b.Error.Code; {
	case code == "job_not_found" || code == "topic_not_found":
		status = 404
	case code == "lease_mismatch" || code == "not_in_state":
		status = 409
	case code == "body_too_large":
		status = 413
	case strings.HasPrefix(code, "store_"):
		status = 503
	case code == "forbidden":
		status = 403
	}
	return &Error{Status: status, Code: b.Error.Code, Message: b.Error.Message}
}

func mustJSON(v interface{}) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Ready asks GET /readyz: nil when the server and its store answer.
func (c *Client) Ready(ctx context.Context) error {
	status, data, ra, err := c.once(ctx, "GET", "/readyz", nil)
	if err != nil {
		return &TransportError{Op: "GET /readyz", Err: err}
	}
	if status != 200 {
		return parseError(status, data, ra)
	}
	return nil
}

// Int returns a pointer to v, for optional fields.
func Int(v int) *int { return &v }

// Int64 returns a pointer to v, for optional fields.
func Int64(v int64) *int64 { return &v }

// Uint32 returns a pointer to v, for optional fields (Priority).
func Uint32(v uint32) *uint32 { return &v }

// Bool returns a pointer to v, for optional fields.
func Bool(v bool) *bool { return &v }

// Ms converts a duration to the wire's milliseconds.
func Ms(d time.Duration) int64 { return d.Milliseconds() }

// Time converts the wire's Unix milliseconds to a time.Time.
func Time(ms int64) time.Time { return time.UnixMilli(ms) }
