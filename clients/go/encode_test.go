package dq

import (
	"encoding/json"
	"testing"
	"time"
)

func TestEncodeEnqueueKeepsRawBody(t *testing.T) {
	raw := json.RawMessage(`{"b": 1e400,  "a":[18446744073709551617, -0, "<\u00e9>"] }`)
	got, err := encodeEnqueue(raw, &EnqueueOptions{ID: "x", Delay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"x","delay_ms":1000,"body":` + string(raw) + `}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	got, _ = encodeEnqueue(json.RawMessage(`1`), nil)
	if string(got) != `{"body":1}` {
		t.Fatalf("got %s", got)
	}
	got, _ = encodeEnqueue(nil, nil)
	if string(got) != `{}` {
		t.Fatalf("got %s", got)
	}
	got, _ = encodeEnqueue(Bytes{1, 2}, &EnqueueOptions{Priority: Uint32(0)})
	if string(got) != `{"body_base64":"AQI=","priority":0}` {
		t.Fatalf("got %s", got)
	}
	if _, err := encodeEnqueue(json.RawMessage(`{`), nil); err == nil {
		t.Fatal("invalid JSON accepted")
	}
}

func TestPathEscape(t *testing.T) {
	if got := PathEscape("a/b c:d+é"); got != "a%2Fb%20c:d%2B%C3%A9" {
		t.Fatal(got)
	}
}
