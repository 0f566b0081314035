package dq

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
)

// RateLimit is a token bucket: at most Limit hand-outs per PerMs ms, up to
// Burst at once (0: Limit).
type RateLimit struct {
	Limit int   `json:"limit"`
	PerMs int64 `json:"per_ms"`
	Burst int   `json:"burst,omitempty"`
}

// TopicSettings are the fields of PUT /v1/topics/{topic}: those left nil
// keep their value. Raw holds any other field (or an explicit null, e.g.
// Raw["rate_limit"] = json.RawMessage("null") removes a rate limit); it
// wins over the typed fields.
type TopicSettings struct {
	MaxAttempts    *int                       `json:"max_attempts,omitempty"`
	LeaseMs        *int64                     `json:"lease_ms,omitempty"`
	DeadCap        *int64                     `json:"dead_cap,omitempty"`
	DefaultDelayMs *int64                     `json:"default_delay_ms,omitempty"`
	Retry          *RetryPolicy               `json:"retry,omitempty"`
	Delivery       json.RawMessage            `json:"delivery,omitempty"`
	Partitions     *int                       `json:"partitions,omitempty"`
	DedupMs        *int64                     `json:"dedup_ms,omitempty"`
	Paused         *bool                      `json:"paused,omitempty"`
	RateLimit      *RateLimit                 `json:"rate_limit,omitempty"`
	KeyConcurrency *int                       `json:"key_concurrency,omitempty"`
	KeyRateLimit   *RateLimit                 `json:"key_rate_limit,omitempty"`
	Raw            map[string]json.RawMessage `json:"-"`
}

// TopicConfig is a topic's settings in force (push secrets redacted).
type TopicConfig struct {
	MaxAttempts    int             `json:"max_attempts"`
	LeaseMs        int64           `json:"lease_ms"`
	DeadCap        int64           `json:"dead_cap"`
	DefaultDelayMs int64           `json:"default_delay_ms"`
	Retry          json.RawMessage `json:"retry,omitempty"`
	Delivery       json.RawMessage `json:"delivery,omitempty"`
	Partitions     int             `json:"partitions"`
	DedupMs        int64           `json:"dedup_ms"`
	Paused         bool            `json:"paused"`
	RateLimit      *RateLimit      `json:"rate_limit,omitempty"`
	KeyConcurrency int             `json:"key_concurrency,omitempty"`
	KeyRateLimit   *RateLimit      `json:"key_rate_limit,omitempty"`
}

// TopicCounters count what happened since the topic was created.
type TopicCounters struct {
	Enqueued    int64 `json:"enqueued"`
	Acked       int64 `json:"acked"`
	Failed      int64 `json:"failed"`
	Expired     int64 `json:"expired"`
	Dead        int64 `json:"dead"`
	Cancelled   int64 `json:"cancelled"`
	DeadDropped int64 `json:"dead_dropped"`
	Replayed    int64 `json:"replayed"`
	RateLimited int64 `json:"rate_limited"`
}

// TopicStats are a topic's counts now.
type TopicStats struct {
	Scheduled       int64         `json:"scheduled"`
	Ready           int64         `json:"ready"`
	Reserved        int64         `json:"reserved"`
	Dead            int64         `json:"dead"`
	OldestOverdueMs int64         `json:"oldest_overdue_ms"`
	Counters        TopicCounters `json:"counters"`
	Partial         bool          `json:"partial,omitempty"`
	Missing         []string      `json:"missing,omitempty"`
	PausedUntilMs   int64         `json:"paused_until_ms,omitempty"`
}

// TopicInfo is a topic with its settings and counts (Config is nil in a listing).
type TopicInfo struct {
	Name   string       `json:"name"`
	Config *TopicConfig `json:"config,omitempty"`
	// ConfigSources says where each setting of Config comes from, by its
	// wire name: "default" (for the topic's delivery mode) or "set" (nil
	// in a listing).
	ConfigSources map[string]string `json:"config_sources,omitempty"`
	Stats         *TopicStats       `json:"stats,omitempty"`
}

func topicPath(topic string) string { return "/v1/topics/" + PathEscape(topic) }

// Topic reads a topic's settings and counts ("topic_not_found" if unknown).
func (c *Client) Topic(ctx context.Context, topic string) (*TopicInfo, error) {
	var out TopicInfo
	if err := c.call(ctx, "GET", topicPath(topic), nil, retryIdempotent, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ConfigureTopic changes a topic's settings (creating it if new) and
// returns the settings in force.
func (c *Client) ConfigureTopic(ctx context.Context, topic string, s TopicSettings) (*TopicConfig, error) {
	body := mustJSON(s)
	if len(s.Raw) > 0 {
		m := map[string]json.RawMessage{}
		_ = json.Unmarshal(body, &m)
		for k, v := range s.Raw {
			m[k] = v
		}
		body = mustJSON(m)
	}
	var out struct {
		Config TopicConfig `json:"config"`
	}
	if err := c.call(ctx, "PUT", topicPath(topic), body, retryIdempotent, &out); err != nil {
		return nil, err
	}
	return &out.Config, nil
}

// DeleteTopic deletes a topic and every job in it; it returns how many jobs went.
func (c *Client) DeleteTopic(ctx context.Context, topic string) (int64, error) {
	var out struct {
		DeletedJobs int64 `json:"deleted_jobs"`
	}
	if err := c.call(ctx, "DELETE", topicPath(topic), nil, retryUnsent, &out); err != nil {
		return 0, err
	}
	return out.DeletedJobs, nil
}

// TopicPage is one page of ListTopics; NextCursor is "" after the last.
type TopicPage struct {
	Topics     []TopicInfo `json:"topics"`
	NextCursor string      `json:"next_cursor"`
}

// ListTopicsOptions select a page of topics.
type ListTopicsOptions struct {
	Prefix string
	Cursor string
	Limit  int // 1–1000; 0: 100
}

// ListTopics reads one page of topics in name order, with their counts.
func (c *Client) ListTopics(ctx context.Context, o ListTopicsOptions) (*TopicPage, error) {
	q := url.Values{}
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	p := "/v1/topics"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var out struct {
		Topics     []TopicInfo `json:"topics"`
		NextCursor *string     `json:"next_cursor"`
	}
	if err := c.call(ctx, "GET", p, nil, retryIdempotent, &out); err != nil {
		return nil, err
	}
	page := &TopicPage{Topics: out.Topics}
	if out.NextCursor != nil {
		page.NextCursor = *out.NextCursor
	}
	return page, nil
}

// Topics lists every topic whose name starts with prefix ("" for all),
// following the pages.
func (c *Client) Topics(ctx context.Context, prefix string) ([]TopicInfo, error) {
	var all []TopicInfo
	cursor := ""
	for {
		page, err := c.ListTopics(ctx, ListTopicsOptions{Prefix: prefix, Cursor: cursor, Limit: 1000})
		if err != nil {
			return nil, err
		}
		all = append(all, page.Topics...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

// ListDead reads a topic's dead letters, oldest death first (limit 0: 100).
func (c *Client) ListDead(ctx context.Context, topic string, offset, limit int) ([]JobInfo, error) {
	q := url.Values{}
	q.Set("offset", strconv.Itoa(offset))
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Jobs []JobInfo `json:"jobs"`
	}
	if err := c.call(ctx, "GET", topicPath(topic)+"/dead?"+q.Encode(), nil, retryIdempotent, &out); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// ReplayDead makes dead letters due now with a fresh attempt count: those
// with these ids, or all of them when ids is nil. It returns how many.
func (c *Client) ReplayDead(ctx context.Context, topic string, ids []string) (int64, error) {
	body := []byte("{}")
	if ids != nil {
		body = mustJSON(map[string][]string{"ids": ids})
	}
	var out struct {
		Replayed int64 `json:"replayed"`
	}
	if err := c.call(ctx, "POST", topicPath(topic)+"/dead/replay", body, retryIdempotent, &out); err != nil {
		return 0, err
	}
	return out.Replayed, nil
}

// PurgeDead deletes a topic's dead letters; it returns how many.
func (c *Client) PurgeDead(ctx context.Context, topic string) (int64, error) {
	var out struct {
		Purged int64 `json:"purged"`
	}
	if err := c.call(ctx, "DELETE", topicPath(topic)+"/dead", nil, retryIdempotent, &out); err != nil {
		return 0, err
	}
	return out.Purged, nil
}

// ScheduleSpec is a schedule: Topic and one of Cron / Every are required.
type ScheduleSpec struct {
	Topic    string          `json:"topic"`
	Cron     string          `json:"cron,omitempty"`
	Every    string          `json:"every,omitempty"`
	Timezone string          `json:"timezone,omitempty"`
	Body     json.RawMessage `json:"body,omitempty"`
	Priority *uint32         `json:"priority,omitempty"`
	CatchUp  string          `json:"catch_up,omitempty"` // e.g. "one"
	Paused   *bool           `json:"paused,omitempty"`
	StartAt  string          `json:"start_at,omitempty"` // RFC 3339
	EndAt    string          `json:"end_at,omitempty"`
}

// Slot is one firing time of a schedule.
type Slot struct {
	At   string `json:"at"`
	AtMs int64  `json:"at_ms"`
}

// Schedule is a schedule as dq shows it.
type Schedule struct {
	Name    string          `json:"name"`
	Spec    json.RawMessage `json:"spec"`
	Rule    string          `json:"rule"`
	Last    *Slot           `json:"last,omitempty"`
	LastJob *struct {
		ID    string `json:"id"`
		State string `json:"state,omitempty"`
	} `json:"last_job,omitempty"`
	Next []Slot `json:"next"`
}

func schedulePath(name string) string { return "/v1/schedules/" + PathEscape(name) }

// PutSchedule creates or replaces a schedule.
func (c *Client) PutSchedule(ctx context.Context, name string, spec ScheduleSpec) (*Schedule, error) {
	var out Schedule
	if err := c.call(ctx, "PUT", schedulePath(name), mustJSON(spec), retryIdempotent, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Schedules lists every schedule by name.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	var out struct {
		Schedules []Schedule `json:"schedules"`
	}
	if err := c.call(ctx, "GET", "/v1/schedules", nil, retryIdempotent, &out); err != nil {
		return nil, err
	}
	return out.Schedules, nil
}

// Schedule reads one schedule ("schedule_not_found" if unknown).
func (c *Client) Schedule(ctx context.Context, name string) (*Schedule, error) {
	var out Schedule
	if err := c.call(ctx, "GET", schedulePath(name), nil, retryIdempotent, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PauseSchedule stops a schedule firing.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*Schedule, error) {
	var out Schedule
	if err := c.call(ctx, "POST", schedulePath(name)+"/pause", nil, retryIdempotent, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ResumeSchedule makes a paused schedule fire again from now on.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*Schedule, error) {
	var out Schedule
	if err := c.call(ctx, "POST", schedulePath(name)+"/resume", nil, retryIdempotent, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSchedule deletes a schedule (jobs already enqueued still run).
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", schedulePath(name), nil, retryUnsent, nil)
}
