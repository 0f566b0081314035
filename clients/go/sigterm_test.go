package dq_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dq "github.com/dq-project/dq/clients/go"
)

// The example program (signal.NotifyContext) gets SIGTERM while four
// handlers run: it acks them, leaves nothing reserved and exits 0.
func TestExampleProgramStopsOnSIGTERM(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		if goTool, err = exec.LookPath("go"); err != nil {
			t.Skip("no go tool to build the example with")
		}
	}
	bin := filepath.Join(t.TempDir(), "order-timeout")
	build := exec.Command(goTool, "build", "-o", bin, "./examples/order-timeout")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	eachStore(t, func(t *testing.T, s *server) {
		ctx := ctxT(t, 60*time.Second)
		c := s.client(t)
		topic := topicName(t)
		const total = 12
		jobs := make([]dq.NewJob, total)
		for i := range jobs {
			jobs[i] = dq.NewJob{Body: map[string]int{"order": i}, EnqueueOptions: dq.EnqueueOptions{ID: fmt.Sprintf("order-%d", i)}}
		}
		if _, err := c.EnqueueBatch(ctx, topic, jobs); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "DQ_URL="+s.URL, "TOPIC="+topic, "SLOW_MS=1000")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = testWriter{t}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		var mu sync.Mutex
		var lines []string
		startedCh := make(chan struct{}, total)
		readDone := make(chan struct{})
		go func() {
			defer close(readDone)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				mu.Lock()
				lines = append(lines, sc.Text())
				mu.Unlock()
				if strings.HasPrefix(sc.Text(), "started ") {
					startedCh <- struct{}{}
				}
			}
		}()
		for i := 0; i < 4; i++ {
			select {
			case <-startedCh:
			case <-time.After(20 * time.Second):
				t.Fatal("the example did not start handlers")
			}
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { <-readDone; exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("the example exited with %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the example did not exit within 20 s of SIGTERM")
		}
		mu.Lock()
		defer mu.Unlock()
		started, closed := 0, 0
		for _, l := range lines {
			if strings.HasPrefix(l, "started ") {
				started++
			}
			if strings.HasPrefix(l, "closed ") {
				closed++
			}
		}
		if started < 4 || closed != started || lines[len(lines)-1] != "stopped" {
			t.Fatalf("output: %q", lines)
		}
		st := topicStats(t, c, topic)
		if st.Reserved != 0 || st.Counters.Acked != int64(closed) || st.Ready != int64(total-closed) {
			t.Fatalf("after SIGTERM: %+v (closed %d)", st, closed)
		}
	})
}
