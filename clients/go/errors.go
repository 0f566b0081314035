package dq

import (
	"errors"
	"fmt"
	"time"
)

// Error is an error answer of the dq API: the HTTP status, dq's stable
// machine-readable code (e.g. "invalid_delay", "job_not_found",
// "lease_mismatch") and its message. Test for it with errors.As:
//
//	var e *dq.Error
//	if errors.As(err, &e) && e.Code == "job_not_found" { ... }
type Error struct {
	// Status is the HTTP status (400, 404, 409, 503, ...). For an item of a
	// batch it is the status the single call would have answered.
	Status int
	// Code is dq's error code ("invalid_topic", "job_not_found", ...).
	Code string
	// Message is for people.
	Message string
	// RetryAfter is the server's Retry-After, when it sent one (0 otherwise).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("dq: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("dq: HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// RetryAfterMs is RetryAfter in milliseconds (0 when the server sent none).
func (e *Error) RetryAfterMs() int64 { return e.RetryAfter.Milliseconds() }

// TransportError is a failure to talk to dq at all: the connection was
// refused or broke, the request timed out, or the reply was not what the API
// documents. It wraps the cause (errors.Is(err, context.DeadlineExceeded)
// works through it).
type TransportError struct {
	// Op names the call, e.g. "POST /v1/reserve".
	Op string
	// Err is the cause.
	Err error
}

func (e *TransportError) Error() string { return fmt.Sprintf("dq: %s: %v", e.Op, e.Err) }

// Unwrap returns the cause.
func (e *TransportError) Unwrap() error { return e.Err }

// IsCode reports whether err is (or wraps) a *dq.Error with this code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// IsNotFound reports whether err is a 404 of the API (job_not_found,
// topic_not_found, schedule_not_found, ...).
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == 404
}

// deadError marks a handler error as permanent: see Dead.
type deadError struct{ err error }

func (d *deadError) Error() string {
	if d.err == nil {
		return "dead"
	}
	return d.err.Error()
}
func (d *deadError) Unwrap() error { return d.err }

// Dead wraps err so that a Worker sends the job to the dead letters at once
// (nack with dead: true), whatever attempts are left: a permanent failure.
// The job's last_error is err's message.
func Dead(err error) error {
	if err == nil {
		err = errors.New("dead")
	}
	return &deadError{err: err}
}

// IsDead reports whether err was made by Dead (or wraps such an error).
func IsDead(err error) bool {
	var d *deadError
	return errors.As(err, &d)
}

// retryLater asks the worker to give the job back: see RetryLater.
type retryLater struct{ delay time.Duration }

func (r *retryLater) Error() string { return fmt.Sprintf("retry later (in %v)", r.delay) }

// RetryLater, returned by a handler, gives the job back to dq without
// counting the attempt (a release): it is due again after d. For "not yet,
// look again later", e.g. a payment still pending.
func RetryLater(d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &retryLater{delay: d}
}

// RetryLaterDelay reports whether err was made by RetryLater, and its delay.
func RetryLaterDelay(err error) (time.Duration, bool) {
	var r *retryLater
	if errors.As(err, &r) {
		return r.delay, true
	}
	return 0, false
}
