package dq_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	dq "github.com/dq-project/dq/clients/go"
)

// A 503 with Retry-After is retried within the budget, then returned.
func TestRetryAfter503(t *testing.T) {
	var calls int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if atomic.AddInt32(&calls, 1) <= 2 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"error":{"code":"store_unavailable","message":"redis down"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"a","created":true,"replaced":false,"due_at_ms":1,"state":"ready"}`))
	}))
	defer srv.Close()
	c, err := dq.NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Enqueue(context.Background(), "t", 1, nil)
	if err != nil || e.ID != "a" || atomic.LoadInt32(&calls) != 3 {
		t.Fatalf("%+v %v after %d calls", e, err, calls)
	}

	atomic.StoreInt32(&calls, 0)
	c, _ = dq.NewClient(srv.URL, dq.WithRetryBudget(0))
	_, err = c.Enqueue(context.Background(), "t", 1, nil)
	var de *dq.Error
	if !errors.As(err, &de) || de.Status != 503 || de.Code != "store_unavailable" || de.RetryAfter <= 0 || de.Message != "redis down" {
		t.Fatalf("want the 503, got %v", err)
	}

	// Retries stop when the context ends.
	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(503)
		_, _ = w.Write([]byte(`{"error":{"code":"store_unavailable","message":"down"}}`))
	}))
	defer never.Close()
	c, _ = dq.NewClient(never.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Get(ctx, "t", "x")
	if !errors.As(err, &de) || time.Since(start) > 2*time.Second {
		t.Fatalf("got %v after %v", err, time.Since(start))
	}
}

// An API key goes out as a bearer token.
func TestAPIKeyHeader(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{"jobs":[]}`))
	}))
	defer srv.Close()
	c, _ := dq.NewClient(srv.URL, dq.WithAPIKey("dqk_secret"), dq.WithTimeout(5*time.Second))
	if _, err := c.Reserve(context.Background(), []string{"t"}, nil); err != nil {
		t.Fatal(err)
	}
	if got.Load() != "Bearer dqk_secret" {
		t.Fatalf("Authorization: %v", got.Load())
	}
}
