package dq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dq "github.com/dq-project/dq/clients/go"
)

// dqBin is the dq binary the tests start: $DQ_BIN, else
// <repository root>/target/debug/dq.
func dqBin(t testing.TB) string {
	t.Helper()
	wd, _ := os.Getwd() // clients/go: go test runs in the package's directory
	root := filepath.Join(wd, "..", "..")
	bin := os.Getenv("DQ_BIN")
	if bin == "" {
		bin = filepath.Join(root, "target", "debug", "dq")
	} else if !filepath.IsAbs(bin) {
		bin = filepath.Join(root, bin) // relative to the repository root
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the dq binary %s does not exist: build it (cargo build -p dq-cli) or set DQ_BIN to its absolute path", bin)
	}
	return bin
}

// stores are the stores every server-starting test runs on: embedded, and
// Redis when DQ_TEST_REDIS_URL is set.
func stores() []string {
	s := []string{"embedded"}
	if os.Getenv("DQ_TEST_REDIS_URL") != "" {
		s = append(s, "redis")
	}
	return s
}

// eachStore runs f once per store, each with a fresh dq serve.
func eachStore(t *testing.T, f func(t *testing.T, s *server)) {
	for _, store := range stores() {
		store := store
		t.Run(store, func(t *testing.T) {
			s := startServer(t, store)
			f(t, s)
		})
	}
}

type server struct {
	t       testing.TB
	store   string
	port    int
	dataDir string
	logPath string
	URL     string

	mu  sync.Mutex
	cmd *exec.Cmd
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startServer(t testing.TB, store string) *server {
	t.Helper()
	dir := t.TempDir()
	s := &server{t: t, store: store, port: freePort(t), dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "dq.log")}
	s.URL = fmt.Sprintf("http://127.0.0.1:%d", s.port)
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			if b, err := os.ReadFile(s.logPath); err == nil && len(b) > 0 {
				t.Logf("dq serve log:\n%s", tail(string(b), 4000))
			}
		}
	})
	s.start()
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (s *server) start() {
	s.t.Helper()
	args := []string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", s.port),
		"--config", "/dev/null", "--shutdown-grace", "3s", "--log-level", "warn"}
	if s.store == "redis" {
		args = append(args, "--redis", os.Getenv("DQ_TEST_REDIS_URL"), "--redis-timeout", "1s")
	} else {
		args = append(args, "--data-dir", s.dataDir)
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(dqBin(s.t), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("start dq serve: %v", err)
	}
	logf.Close()
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(20 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		res, err := hc.Get(s.URL + "/readyz")
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(s.logPath)
			s.t.Fatalf("dq serve exited before it was ready:\n%s", tail(string(b), 4000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("dq serve not ready within 20 s at %s", s.URL)
		}
	}
}

// kill stops the server at once (SIGKILL) and waits for it to be gone.
func (s *server) kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	// cmd.Wait runs in start's goroutine; wait until the port is free.
	for i := 0; i < 100; i++ {
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) client(t testing.TB, opts ...dq.Option) *dq.Client {
	t.Helper()
	c, err := dq.NewClient(s.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// topicName is unique per test and run (several suites may share one Redis).
func topicName(t testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.NewReplacer("/", ".", " ", "_", "#", "_").Replace(t.Name())
	return "go." + name + "." + hex.EncodeToString(b)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testLogger writes the worker's log lines to the test log.
func testLogger(t testing.TB) *log.Logger {
	return log.New(testWriter{t}, "", log.Lmicroseconds)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitFor polls cond every 20 ms until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
