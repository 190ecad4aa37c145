// Package fleetclient is a Go client of the inference fleet (docs/clients.md,
// docs/protocol.md): it sends requests to the model topics with Sarama
// (CloudEvents 1.0, binary mode: the raw input as the value, metadata in
// headers) and waits for the answers in Redis with Redigo (BLPOP on the
// request's ready list, then HGETALL of its result hash).
//
// Lanes and jobs: SendOptions{Lane: Bulk} sends to the model's bulk topic
// (infer.<model>.bulk), which workers serve with the capacity interactive
// requests leave; SendOptions{Job: "backfill-7"} tags a request with a job
// (header ce_fleetjob), and Cancel("backfill-7", 0) makes workers answer
// every request of that job they have not computed yet with status
// "cancelled".
//
// Admit refuses a request whose predicted wait (the workers' backlog divided
// by their drain rate) would outlast its deadline: the rule of the Rust
// producer's BacklogGuard, so a refused request is never sent only to expire.
package fleetclient

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
	"github.com/gomodule/redigo/redis"
)

const (
	specVersion = "1.0"
	eventType   = "fleet.infer.v1"
	// Text is the content type of a text request.
	Text = "text/plain; charset=utf-8"
	// MaxMessageBytes is the largest value (20 MB) plus room for key and
	// headers: the topics' max.message.bytes. Sarama's default (1 MB)
	// would refuse images.
	MaxMessageBytes = 20_000_000 + 64*1024
	// DefaultRequestTTL is what a worker applies without ce_deadline.
	DefaultRequestTTL = 30 * time.Second
	maxReportAgeMs    = 5_000
	minDrainPerS      = 0.5
	maxParts          = 16
	// JobHeader carries the job a request belongs to (a CloudEvents
	// extension attribute); same alphabet and length as a request id.
	JobHeader = "ce_fleetjob"
	// DefaultCancelKeep is how long a cancel lasts unless told otherwise: a
	// week, Kafka's default retention, so a cancelled job's messages read
	// late are not computed either.
	DefaultCancelKeep = 7 * 24 * time.Hour
)

// An answer's status (docs/answer.schema.json). Only StatusOK has an
// Output, only StatusError an Error; StatusExpired and StatusCancelled
// were never computed (StatusCancelled: the request's job was cancelled).
const (
	StatusOK        = "ok"
	StatusError     = "error"
	StatusExpired   = "expired"
	StatusCancelled = "cancelled"
)

// Lane is which of a model's two topics a request goes to.
type Lane string

const (
	// Interactive requests (a person waits) go to infer.<model>; the
	// default (the zero Lane is Interactive too).
	Interactive Lane = "interactive"
	// Bulk requests (a backfill: throughput matters) go to
	// infer.<model>.bulk, served with the capacity interactive ones leave.
	Bulk Lane = "bulk"
)

var requestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func checkID(what, id string) error {
	if !requestID.MatchString(id) {
		return fmt.Errorf("%s %q: 1-128 characters of A-Z a-z 0-9 . _ : -", what, id)
	}
	return nil
}

func laneSuffix(lane Lane) (string, error) {
	switch lane {
	case "", Interactive:
		return "", nil
	case Bulk:
		return ".bulk", nil
	}
	return "", fmt.Errorf("lane %q is not one of interactive, bulk", string(lane))
}

// Options name the release's prefixes (defaults infer. and fleet:) and who sends.
type Options struct {
	TopicPrefix string
	RedisPrefix string
	Source      string
}

// Client sends requests and waits for answers; safe for concurrent use.
type Client struct {
	producer sarama.SyncProducer
	redis    *redis.Pool
	opts     Options
	mu       sync.Mutex
	sent     map[string][]int64 // model -> send times (ms), for admission
}

// Answer is one model's answer (docs/answer.schema.json).
type Answer struct {
	Status  string          `json:"status"`
	Model   string          `json:"model"`
	Version uint64          `json:"version"`
	Output  json.RawMessage `json:"output,omitempty"`
	Error   *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
	// TimingsMs is on every answer a worker writes; nil only if absent.
	TimingsMs *Timings `json:"timings_ms,omitempty"`
}

// Timings of one answer, in milliseconds (docs/protocol.md): Queue from
// ce_time to the start of the model call, Infer the batch's model call (0 for a
// feature-cache hit or an answer given without compute), Total from ce_time
// to the answer.
type Timings struct {
	Queue float64 `json:"queue"`
	Infer float64 `json:"infer"`
	Total float64 `json:"total"`
}

// Overloaded is returned when the predicted wait exceeds the deadline: not sent.
type Overloaded struct {
	Model         string
	PredictedWait time.Duration
	DeadlineLeft  time.Duration
}

func (e *Overloaded) Error() string {
	return fmt.Sprintf("%s: predicted wait %v exceeds the deadline's %v; shed or retry later",
		e.Model, e.PredictedWait, e.DeadlineLeft)
}

// Timeout is returned when not every model answered in time.
type Timeout struct {
	ID      string
	Missing []string
}

func (e *Timeout) Error() string {
	return fmt.Sprintf("request %s: no answer from %v", e.ID, e.Missing)
}

// New connects to the brokers and to Redis at redisURL
// (redis://[user:password@]host:port).
func New(brokers []string, redisURL string, opts Options) (*Client, error) {
	if opts.TopicPrefix == "" {
		opts.TopicPrefix = "infer."
	}
	if opts.RedisPrefix == "" {
		opts.RedisPrefix = "fleet:"
	}
	if opts.Source == "" {
		opts.Source = "go-client"
	}
	config := sarama.NewConfig()
	config.Version = sarama.V2_0_0_0 // headers need 0.11 or later
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Producer.MaxMessageBytes = MaxMessageBytes
	// Retried batches never duplicate a request.
	config.Producer.Idempotent = true
	config.Net.MaxOpenRequests = 1
	producer, err := sarama.NewSyncProducer(brokers, config)
	if err != nil {
		return nil, err
	}
	pool := &redis.Pool{
		MaxIdle:     8,
		IdleTimeout: time.Minute,
		Dial: func() (redis.Conn, error) {
			return redis.DialURL(redisURL, redis.DialConnectTimeout(2*time.Second))
		},
	}
	return &Client{producer: producer, redis: pool, opts: opts, sent: map[string][]int64{}}, nil
}

// Topic is where interactive requests for model go: infer.<model>.
func (c *Client) Topic(model string) string { return c.opts.TopicPrefix + model }

// LaneTopic is where requests for model in lane go: infer.<model> or
// infer.<model>.bulk; an error for a lane that is neither.
func (c *Client) LaneTopic(model string, lane Lane) (string, error) {
	suffix, err := laneSuffix(lane)
	if err != nil {
		return "", err
	}
	return c.opts.TopicPrefix + model + suffix, nil
}

// ResultKey is the hash of a request's answers; the braces are its hash tag.
func (c *Client) ResultKey(id string) string { return c.opts.RedisPrefix + "result:{" + id + "}" }

// ReadyKey is the list a worker pushes to once per answer.
func (c *Client) ReadyKey(id string) string { return c.opts.RedisPrefix + "ready:{" + id + "}" }

// CancelKey is present while job is cancelled; the braces are its hash tag.
func (c *Client) CancelKey(job string) string { return c.opts.RedisPrefix + "cancel:{" + job + "}" }

// BacklogKey is the hash of the model's workers' backlog reports.
func (c *Client) BacklogKey(model string) string { return c.opts.RedisPrefix + "backlog:" + model }

func nowMs() int64 { return time.Now().UnixMilli() }

// rfc3339 is ce_time: UTC with milliseconds, e.g. 2026-12-02T17:00:00.123Z.
func rfc3339(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// SendOptions: an absolute deadline (Unix ms, 0: the worker's default from
// ce_time), how many models the request fans out to, whether to apply
// admission first, the lane ("" or Interactive: infer.<model>; Bulk:
// infer.<model>.bulk) and the job ("": none; else the ce_fleetjob that
// Cancel names, same rule as a request id). To make a single request
// cancellable, send it with its own id as its Job.
type SendOptions struct {
	DeadlineMs int64
	Parts      int
	Admit      bool
	Lane       Lane
	Job        string
}

// Send produces one request and waits for the broker's ack. The key is the
// request id (ce_id equals it); reusing an id within the result TTL returns
// the earlier answer.
func (c *Client) Send(model, id string, value []byte, contentType string, opt SendOptions) error {
	if err := checkID("request id", id); err != nil {
		return err
	}
	topic, err := c.LaneTopic(model, opt.Lane)
	if err != nil {
		return err
	}
	if opt.Job != "" {
		if err := checkID("job id", opt.Job); err != nil {
			return err
		}
	}
	if opt.Parts == 0 {
		opt.Parts = 1
	}
	if opt.Parts < 1 || opt.Parts > maxParts {
		return fmt.Errorf("parts must be 1-%d", maxParts)
	}
	created := nowMs()
	if opt.Admit {
		if err := c.admitAt(model, opt.DeadlineMs, created); err != nil {
			return err
		}
	}
	header := func(k, v string) sarama.RecordHeader { return sarama.RecordHeader{Key: []byte(k), Value: []byte(v)} }
	headers := []sarama.RecordHeader{
		header("ce_specversion", specVersion),
		header("ce_type", eventType),
		header("ce_id", id),
		header("ce_source", c.opts.Source),
		header("ce_time", rfc3339(created)),
		header("content-type", contentType),
	}
	if opt.DeadlineMs > 0 {
		headers = append(headers, header("ce_deadline", strconv.FormatInt(opt.DeadlineMs, 10)))
	}
	if opt.Parts > 1 {
		headers = append(headers, header("ce_parts", strconv.Itoa(opt.Parts)))
	}
	if opt.Job != "" {
		headers = append(headers, header(JobHeader, opt.Job))
	}
	message := &sarama.ProducerMessage{
		Topic: topic, Key: sarama.StringEncoder(id), Value: sarama.ByteEncoder(value), Headers: headers,
	}
	if _, _, err := c.producer.SendMessage(message); err != nil {
		return err
	}
	c.mu.Lock()
	c.sent[model] = append(c.sent[model], created)
	c.mu.Unlock()
	return nil
}

// SendText sends a UTF-8 text.
func (c *Client) SendText(model, id, text string, opt SendOptions) error {
	return c.Send(model, id, []byte(text), Text, opt)
}

// Part is one model's share of a fan-out request.
type Part struct {
	Model       string
	Value       []byte
	ContentType string
}

// SendFanout sends one request to several models (an image to a vision
// model, its caption to a text model): ce_parts = len(parts); wait for all.
func (c *Client) SendFanout(id string, parts []Part, opt SendOptions) error {
	opt.Parts = len(parts)
	for _, p := range parts {
		if err := c.Send(p.Model, id, p.Value, p.ContentType, opt); err != nil {
			return err
		}
	}
	return nil
}

// Cancel marks job cancelled: from now on workers answer each of its
// requests that they have not computed yet with StatusCancelled (no output,
// no error) instead of computing it; a batch already in a model is
// finished. The mark is SET <redis prefix>cancel:{<job>} <now ms> EX
// <keep, in whole seconds>, kept as long as the job's messages can wait in
// Kafka (keep 0: DefaultCancelKeep, a week). Cancelling twice, or a job no
// request named, is harmless. A single request is cancellable this way only
// if it was sent with its id as its Job.
func (c *Client) Cancel(job string, keep time.Duration) error {
	if err := checkID("job id", job); err != nil {
		return err
	}
	if keep == 0 {
		keep = DefaultCancelKeep
	}
	if keep < 0 {
		return fmt.Errorf("cancel keep %v: at least 1 second (0: a week)", keep)
	}
	seconds := int64(math.Ceil(keep.Seconds()))
	conn := c.redis.Get()
	defer conn.Close()
	_, err := conn.Do("SET", c.CancelKey(job), nowMs(), "EX", seconds)
	return err
}

// Admit returns *Overloaded when the model's predicted wait exceeds the time
// left to deadlineMs (0: the worker's 30 s default). No fresh report, no
// drain rate, or Redis unreadable: admitted.
func (c *Client) Admit(model string, deadlineMs int64) error {
	return c.admitAt(model, deadlineMs, nowMs())
}

func (c *Client) admitAt(model string, deadlineMs, at int64) error {
	left := DefaultRequestTTL.Milliseconds()
	if deadlineMs > 0 {
		left = deadlineMs - at
	}
	conn := c.redis.Get()
	defer conn.Close()
	reports, err := redis.StringMap(conn.Do("HGETALL", c.BacklogKey(model)))
	if err != nil {
		return nil
	}
	backlog, drain, reportMs, fresh := loadFromReports(reports, at)
	if !fresh || drain < minDrainPerS {
		return nil
	}
	c.mu.Lock()
	times := c.sent[model]
	kept := times[:0]
	sentSince := 0
	for _, t := range times {
		if t+maxReportAgeMs >= at {
			kept = append(kept, t)
			if t > reportMs {
				sentSince++
			}
		}
	}
	c.sent[model] = kept
	c.mu.Unlock()
	drained := drain * float64(max64(0, at-reportMs)) / 1000
	projected := math.Max(0, float64(backlog+int64(sentSince))-drained)
	wait := int64(math.Ceil(math.Round(projected) / drain * 1000))
	if wait > left {
		return &Overloaded{Model: model, PredictedWait: time.Duration(wait) * time.Millisecond,
			DeadlineLeft: time.Duration(left) * time.Millisecond}
	}
	return nil
}

// loadFromReports sums the fresh reports ("<backlog> <unix ms> <drain per s>").
func loadFromReports(reports map[string]string, at int64) (backlog int64, drain float64, oldest int64, fresh bool) {
	for _, raw := range reports {
		fields := strings.Split(raw, " ")
		if len(fields) < 2 {
			continue
		}
		count, err1 := strconv.ParseInt(fields[0], 10, 64)
		stamp, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err1 != nil || err2 != nil || stamp+maxReportAgeMs < at {
			continue
		}
		rate := 0.0
		if len(fields) > 2 {
			r, err := strconv.ParseFloat(fields[2], 64)
			if err != nil || math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
				continue
			}
			rate = r
		}
		backlog += count
		drain += rate
		if !fresh || stamp < oldest {
			oldest = stamp
		}
		fresh = true
	}
	return
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// Poll returns the answers present now, by model (possibly none).
func (c *Client) Poll(id string) (map[string]Answer, error) {
	conn := c.redis.Get()
	defer conn.Close()
	raw, err := redis.StringMap(conn.Do("HGETALL", c.ResultKey(id)))
	if err != nil {
		return nil, err
	}
	answers := make(map[string]Answer, len(raw))
	for model, text := range raw {
		var a Answer
		if err := json.Unmarshal([]byte(text), &a); err != nil {
			return nil, fmt.Errorf("request %s: answer of %s is not answer JSON: %w", id, model, err)
		}
		answers[model] = a
	}
	return answers, nil
}

// Wait blocks until every model in models has answered id, or returns *Timeout.
// Every status ends the wait: StatusOK (with Output), StatusError (with
// Error), StatusExpired and StatusCancelled (neither: never computed). Look
// at each answer's Status before its Output.
func (c *Client) Wait(id string, models []string, timeout time.Duration) (map[string]Answer, error) {
	deadline := time.Now().Add(timeout)
	for {
		answers, err := c.Poll(id)
		if err != nil {
			return nil, err
		}
		var missing []string
		for _, m := range models {
			if _, ok := answers[m]; !ok {
				missing = append(missing, m)
			}
		}
		if len(missing) == 0 {
			return answers, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return answers, &Timeout{ID: id, Missing: missing}
		}
		// BLPOP holds its connection; 0 would block forever.
		conn := c.redis.Get()
		_, err = conn.Do("BLPOP", c.ReadyKey(id), strconv.FormatFloat(math.Max(left.Seconds(), 0.01), 'f', 3, 64))
		conn.Close()
		if err != nil && err != redis.ErrNil {
			return nil, err
		}
	}
}

// Close releases the producer and the Redis connections.
func (c *Client) Close() error {
	err := c.producer.Close()
	c.redis.Close()
	return err
}
