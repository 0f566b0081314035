package dq_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
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

// TLS with a private certificate authority, and the request timeout.
func TestTLSAndTimeout(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/topics/slow" {
			time.Sleep(time.Second)
		}
		_, _ = w.Write([]byte(`{"name":"t","stats":{"ready":3}}`))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c, err := dq.NewClient(srv.URL, dq.WithTLSConfig(&tls.Config{RootCAs: pool}), dq.WithTimeout(200*time.Millisecond), dq.WithRetryBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Topic(context.Background(), "t")
	if err != nil || info.Stats.Ready != 3 {
		t.Fatalf("%+v %v", info, err)
	}
	_, err = c.Topic(context.Background(), "slow")
	var te *dq.TransportError
	if !errors.As(err, &te) {
		t.Fatalf("want a transport error (timeout), got %v", err)
	}
	// Without the CA the certificate is refused.
	c, _ = dq.NewClient(srv.URL, dq.WithRetryBudget(0))
	if _, err := c.Topic(context.Background(), "t"); !errors.As(err, &te) {
		t.Fatalf("want a transport error (certificate), got %v", err)
	}
}
