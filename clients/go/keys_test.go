package dq_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	dq "github.com/dq-project/dq/clients/go"
)

// API keys against a real server (embedded store only: keys live in the
// store, and a shared Redis must not start asking other suites for keys).
func TestAPIKeys(t *testing.T) {
	s := startServer(t, "embedded")
	ctx := ctxT(t, 30*time.Second)
	res, err := http.Post(s.URL+"/v1/keys", "application/json",
		strings.NewReader(`{"name":"go-test","scopes":["admin"]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var key struct {
		Secret string `json:"secret"`
	}
	if res.StatusCode != 201 || json.NewDecoder(res.Body).Decode(&key) != nil || key.Secret == "" {
		t.Fatalf("create key: %d %+v", res.StatusCode, key)
	}
	topic := topicName(t)
	_, err = s.client(t).Enqueue(ctx, topic, 1, nil)
	apiErr(t, err, 401, "unauthorized")
	_, err = s.client(t, dq.WithAPIKey("dqk_"+strings.Repeat("0", 64))).Enqueue(ctx, topic, 1, nil)
	apiErr(t, err, 401, "unauthorized")
	c := s.client(t, dq.WithAPIKey(key.Secret))
	if _, err := c.Enqueue(ctx, topic, 1, &dq.EnqueueOptions{ID: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, topic, "k"); err != nil {
		t.Fatal(err)
	}
}
