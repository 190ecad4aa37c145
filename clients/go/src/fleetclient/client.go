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
//
// Where answers go: SendOptions{ReplyTo: "kafka"} (header ce_fleetreplyto:
// redis, kafka or redis,kafka) asks for the answer on the model's answers
// topic (infer.<model>[.bulk].answers) instead of, or beside, Redis; ""
// leaves it to the lane's default (interactive: Redis, bulk: Kafka). A job
// sent with SendJob is collected from Kafka, hours later or on another
// machine, with Collect: resumable, each request once.
package fleetclient

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
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
	// ReplyToHeader names where a request's answer goes: ReplyRedis,
	// ReplyKafka or both, comma-separated. Destinations, never a topic: a
	// worker writes to the model's answers topic of the request's lane.
	ReplyToHeader = "ce_fleetreplyto"
	ReplyRedis    = "redis"
	ReplyKafka    = "kafka"
	// StatusHeader carries an answer record's status: a reader counts a
	// job's answers from the headers alone.
	StatusHeader = "ce_fleetstatus"
	// ClockSkewAllowance is how long before a job's start its answers are
	// looked for: record timestamps are the workers' clocks, the start is
	// the sender's.
	ClockSkewAllowance = 10 * time.Minute
	// JobSending and JobSent are a job record's states: still sending
	// (Requests grows), or every request sent (Requests is the job's size).
	JobSending = "sending"
	JobSent    = "sent"
	// How long reading the jobs topic, or an answers topic, to its end may take.
	readToEndTimeout = 60 * time.Second
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

// Statuses are every answer status, in the documented order.
var Statuses = []string{StatusOK, StatusError, StatusExpired, StatusCancelled}

func isStatus(s string) bool {
	for _, status := range Statuses {
		if s == status {
			return true
		}
	}
	return false
}

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

// checkReplyTo returns an error unless replyTo is a comma list of redis and
// kafka: a worker answers a request that names anything else (a topic,
// say) error bad_request.
func checkReplyTo(replyTo string) error {
	for _, word := range strings.Split(replyTo, ",") {
		if w := strings.TrimSpace(word); w != ReplyRedis && w != ReplyKafka {
			return fmt.Errorf("reply-to %q: a comma list of %s, %s", replyTo, ReplyRedis, ReplyKafka)
		}
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
	brokers  []string // for the readers of the jobs and answers topics
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
	return &Client{producer: producer, brokers: brokers, redis: pool, opts: opts, sent: map[string][]int64{}}, nil
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

// AnswersTopic is where workers put the answers of model's lane that go to
// Kafka: infer.<model>.answers or infer.<model>.bulk.answers.
func (c *Client) AnswersTopic(model string, lane Lane) (string, error) {
	topic, err := c.LaneTopic(model, lane)
	if err != nil {
		return "", err
	}
	return topic + ".answers", nil
}

// JobsTopic holds every job's record, keyed by job id (compacted):
// infer.fleet.jobs.
func (c *Client) JobsTopic() string { return c.opts.TopicPrefix + "fleet.jobs" }

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
// infer.<model>.bulk), the job ("": none; else the ce_fleetjob that
// Cancel names, same rule as a request id) and where the answer goes
// ("": the lane's default in the model's config, interactive Redis and
// bulk Kafka; else ce_fleetreplyto: "redis", what Wait reads, "kafka", the
// lane's AnswersTopic, what Collect reads, or "redis,kafka"). To make a
// single request cancellable, send it with its own id as its Job.
type SendOptions struct {
	DeadlineMs int64
	Parts      int
	Admit      bool
	Lane       Lane
	Job        string
	ReplyTo    string
}

// Send produces one request and waits for the broker's ack. The key is the
// request id (ce_id equals it); reusing an id within the result TTL returns
// the earlier answer.
func (c *Client) Send(model, id string, value []byte, contentType string, opt SendOptions) error {
	created := nowMs()
	message, err := c.message(model, id, value, contentType, opt, created)
	if err != nil {
		return err
	}
	if opt.Admit {
		if err := c.admitAt(model, opt.DeadlineMs, created); err != nil {
			return err
		}
	}
	if _, _, err := c.producer.SendMessage(message); err != nil {
		return err
	}
	c.noteSent(model, created, 1)
	return nil
}

// message is the request Send sends, or why it may not be sent.
func (c *Client) message(
	model, id string, value []byte, contentType string, opt SendOptions, created int64,
) (*sarama.ProducerMessage, error) {
	if err := checkID("request id", id); err != nil {
		return nil, err
	}
	topic, err := c.LaneTopic(model, opt.Lane)
	if err != nil {
		return nil, err
	}
	if opt.Job != "" {
		if err := checkID("job id", opt.Job); err != nil {
			return nil, err
		}
	}
	if opt.ReplyTo != "" {
		if err := checkReplyTo(opt.ReplyTo); err != nil {
			return nil, err
		}
	}
	if opt.Parts == 0 {
		opt.Parts = 1
	}
	if opt.Parts < 1 || opt.Parts > maxParts {
		return nil, fmt.Errorf("parts must be 1-%d", maxParts)
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
	if opt.ReplyTo != "" {
		headers = append(headers, header(ReplyToHeader, opt.ReplyTo))
	}
	return &sarama.ProducerMessage{
		Topic: topic, Key: sarama.StringEncoder(id), Value: sarama.ByteEncoder(value), Headers: headers,
	}, nil
}

// noteSent counts n requests sent to model at created, for admission.
func (c *Client) noteSent(model string, created int64, n int) {
	c.mu.Lock()
	for i := 0; i < n; i++ {
		c.sent[model] = append(c.sent[model], created)
	}
	c.mu.Unlock()
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

// JobRecord is a job's record on the jobs topic (JobsTopic, keyed by job
// id): what its sender knows about it, so that whoever collects its
// answers (another machine, hours later) knows how many to wait for and
// where they arrive. The latest record of a job counts.
type JobRecord struct {
	Job   string `json:"job"`
	Model string `json:"model"`
	// Lane is interactive or bulk: whose topics the requests went to.
	Lane string `json:"lane"`
	// AnswersTopic is where its answers that go to Kafka are produced.
	AnswersTopic string `json:"answers_topic"`
	// ReplyTo is what the requests asked for in ce_fleetreplyto; nil: the
	// lane's default.
	ReplyTo *string `json:"reply_to"`
	// State is JobSending or JobSent.
	State string `json:"state"`
	// Requests the broker acknowledged: final once State is JobSent.
	Requests int64 `json:"requests"`
	// StartedMs is when sending began (of the job's first run), Unix ms.
	StartedMs int64 `json:"started_ms"`
	// UpdatedMs is when this record was written, Unix ms.
	UpdatedMs int64 `json:"updated_ms"`
	// Input is what it was sent from (a file name), for people.
	Input *string `json:"input"`
}

// Complete says every request is sent, so Requests is final.
func (r *JobRecord) Complete() bool { return r.State == JobSent }

// answersFromMs is from when (Unix ms, record timestamps) its answers can
// be on the answers topic.
func (r *JobRecord) answersFromMs() int64 {
	return max64(0, r.StartedMs-ClockSkewAllowance.Milliseconds())
}

// parseRecord is a job record's JSON, or nil for a value that is not one.
func parseRecord(value []byte) *JobRecord {
	var record JobRecord
	if json.Unmarshal(value, &record) != nil || record.Job == "" || record.AnswersTopic == "" || record.State == "" {
		return nil
	}
	return &record
}

// NoJobRecord is returned when the jobs topic has no record of the job:
// nothing says how many answers to wait for, or where.
type NoJobRecord struct {
	Job   string
	Topic string
}

func (e *NoJobRecord) Error() string {
	return fmt.Sprintf("no record of job %s on %s: was it sent with SendJob or `fleet-produce bulk`, "+
		"to this broker, under this topic prefix?", e.Job, e.Topic)
}

// JobTimeout is returned when Collect did not get every answer of its job
// in time. What it collected stays in its file: collect again to go on.
type JobTimeout struct {
	Job       string
	Collected int
	Record    JobRecord
	After     time.Duration
}

func (e *JobTimeout) Error() string {
	expected := "not yet known"
	if e.Record.Complete() {
		expected = strconv.FormatInt(e.Record.Requests, 10)
	}
	return fmt.Sprintf("job %s: %d answers collected in %v, of %s (the job's record says %s)",
		e.Job, e.Collected, e.After, expected, e.Record.State)
}

// SendJob sends each of texts to model's bulk lane as one request of job
// job, with request ids <job>-1, <job>-2, ... (Collect gives each answer
// its n back as "line"), and records the job on the jobs topic so that
// anyone can collect it later, from any machine: one record before the
// first request (JobSending), one after the broker acknowledged the last
// (JobSent, Requests = how many it acknowledged: the answers a collector
// waits for). A job sent again under the same id keeps its first start, so
// the answers of its first run are still found. replyTo as in SendOptions
// ("": the bulk lane's default, Kafka). Returns the requests delivered,
// and an error when some were not (the record counts only the delivered).
func (c *Client) SendJob(model string, texts []string, job, replyTo string) (int, error) {
	if err := checkID("job id", job); err != nil {
		return 0, err
	}
	answers, err := c.AnswersTopic(model, Bulk)
	if err != nil {
		return 0, err
	}
	opt := SendOptions{Lane: Bulk, Job: job, ReplyTo: replyTo}
	started := nowMs()
	// Every request is built, and so checked, before anything is sent.
	messages := make([]*sarama.ProducerMessage, 0, len(texts))
	for n, text := range texts {
		message, err := c.message(model, fmt.Sprintf("%s-%d", job, n+1), []byte(text), Text, opt, started)
		if err != nil {
			return 0, err
		}
		messages = append(messages, message)
	}
	earlier, err := c.JobRecord(job)
	if err != nil {
		return 0, err
	}
	record := JobRecord{Job: job, Model: model, Lane: string(Bulk), AnswersTopic: answers, State: JobSending,
		StartedMs: started, UpdatedMs: started}
	if earlier != nil && earlier.StartedMs < started {
		record.StartedMs = earlier.StartedMs
	}
	if replyTo != "" {
		record.ReplyTo = &replyTo
	}
	if err := c.writeRecord(&record); err != nil {
		return 0, fmt.Errorf("writing the record of job %s to %s: %w", job, c.JobsTopic(), err)
	}
	delivered := len(messages)
	sendErr := c.producer.SendMessages(messages)
	var failed sarama.ProducerErrors
	if errors.As(sendErr, &failed) {
		delivered -= len(failed)
	} else if sendErr != nil {
		return 0, sendErr
	}
	c.noteSent(model, started, delivered)
	record.State, record.Requests, record.UpdatedMs = JobSent, int64(delivered), nowMs()
	if err := c.writeRecord(&record); err != nil {
		return delivered, fmt.Errorf("writing the final record of job %s (its collectors wait for it): %w", job, err)
	}
	if sendErr != nil {
		return delivered, fmt.Errorf("%d of %d requests of job %s were not delivered: %w",
			len(messages)-delivered, len(messages), job, sendErr)
	}
	return delivered, nil
}

// writeRecord writes a job record and waits until the broker holds it: a
// collector trusts what the jobs topic says.
func (c *Client) writeRecord(record *JobRecord) error {
	value, err := json.Marshal(record)
	if err != nil {
		return err
	}
	_, _, err = c.producer.SendMessage(&sarama.ProducerMessage{
		Topic: c.JobsTopic(), Key: sarama.StringEncoder(record.Job), Value: sarama.ByteEncoder(value),
	})
	return err
}

// JobRecord is the latest record of job on the jobs topic (read from its
// start to the end it has now), or nil when it has none.
func (c *Client) JobRecord(job string) (*JobRecord, error) {
	if err := checkID("job id", job); err != nil {
		return nil, err
	}
	record, _, err := c.readRecord(job)
	return record, err
}

// readRecord is the latest readable record of job (or nil), and the end
// (high watermark) of each jobs partition it read to.
func (c *Client) readRecord(job string) (*JobRecord, map[int32]int64, error) {
	r, err := c.newReading()
	if err != nil {
		return nil, nil, err
	}
	defer r.close()
	topic := c.JobsTopic()
	partitions, err := r.partitions(topic)
	if err != nil {
		return nil, nil, err
	}
	ends := map[int32]int64{}
	unread := map[int32]int64{}
	for _, p := range partitions {
		low, err := r.client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, nil, err
		}
		high, err := r.client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, nil, err
		}
		ends[p] = high
		if high > low {
			if err := r.add(topic, p, low); err != nil {
				return nil, nil, err
			}
			unread[p] = high
		}
	}
	var latest *JobRecord
	err = r.readToEnds(topic, unread, func(m *sarama.ConsumerMessage) {
		if string(m.Key) == job {
			if record := parseRecord(m.Value); record != nil {
				latest = record
			}
		}
	})
	return latest, ends, err
}

// Collect collects the answers of job from its answers topic into the JSON
// lines file at path, one line per request: {"request_id", "line",
// "status", "answer"} (line: n of an id <job>-<n>, else null; answer: the
// answer JSON as the worker wrote it). Returns the requests collected by
// status (every status present), once the job's record says it is sent and
// the file holds an answer for as many requests as it counts.
//
// Resumable, each request once: the file is the only memory. What it holds
// is read first (a last line cut short, without its newline, is cut off
// and collected again) and only the other requests are appended; a request
// answered twice on the topic (delivery is at least once) is written once,
// its first answer. The topic is read from the job's start less
// ClockSkewAllowance on every partition (records before cannot be the
// job's). Returns *NoJobRecord, and *JobTimeout after timeout (0: wait as
// long as it takes); what was collected stays in the file.
func (c *Client) Collect(job, path string, timeout time.Duration) (counts map[string]int, err error) {
	if err := checkID("job id", job); err != nil {
		return nil, err
	}
	started := time.Now()
	record, jobsEnds, err := c.readRecord(job)
	if err != nil {
		return nil, err
	}
	jobsTopic := c.JobsTopic()
	if record == nil {
		return nil, &NoJobRecord{Job: job, Topic: jobsTopic}
	}
	if record.ReplyTo != nil && !namesKafka(*record.ReplyTo) {
		return nil, fmt.Errorf("job %s's requests asked for their answers in %s: only answers on Kafka can be collected",
			job, *record.ReplyTo)
	}
	held, out, err := openAnswersFile(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(out)
	defer func() {
		// What was collected stays, whatever stopped the collector.
		for _, finish := range []func() error{w.Flush, out.Sync, out.Close} {
			if e := finish(); e != nil && err == nil {
				err = fmt.Errorf("%s: %w", path, e)
			}
		}
	}()
	counts = map[string]int{}
	for _, status := range Statuses {
		counts[status] = 0
	}
	for _, status := range held {
		counts[status]++
	}
	done := func() bool { return record.Complete() && int64(len(held)) >= record.Requests }
	if done() {
		return counts, nil
	}
	r, err := c.newReading()
	if err != nil {
		return counts, err
	}
	defer r.close()
	starts, _, err := r.answersFrom(record.AnswersTopic, record.answersFromMs())
	if err != nil {
		return counts, err
	}
	for p, offset := range starts {
		if err := r.add(record.AnswersTopic, p, offset); err != nil {
			return counts, err
		}
	}
	// The jobs topic from where readRecord stopped: each later record of
	// the job (its final count) is seen.
	for p, end := range jobsEnds {
		if err := r.add(jobsTopic, p, end); err != nil {
			return counts, err
		}
	}
	encoder := json.NewEncoder(w)
	encoder.SetEscapeHTML(false) // the answer as the worker wrote it
	flushed := time.Now()
	for !done() {
		wait := time.Second
		if timeout > 0 {
			left := timeout - time.Since(started)
			if left <= 0 {
				return counts, &JobTimeout{Job: job, Collected: len(held), Record: *record, After: timeout}
			}
			if left < wait {
				wait = left
			}
		}
		m, err := r.next(wait)
		if err != nil {
			return counts, err
		}
		if m != nil && m.Topic == jobsTopic {
			if string(m.Key) == job {
				if latest := parseRecord(m.Value); latest != nil {
					record = latest
				}
			}
		} else if m != nil {
			if id, status, ok := answerOf(m, job); ok && held[id] == "" {
				held[id] = status
				counts[status]++
				if err := encoder.Encode(answerLine(job, id, status, m.Value)); err != nil {
					return counts, fmt.Errorf("%s: %w", path, err)
				}
			}
		}
		if time.Since(flushed) >= time.Second {
			// A collector killed now loses at most a second's lines.
			if err := w.Flush(); err != nil {
				return counts, fmt.Errorf("%s: %w", path, err)
			}
			flushed = time.Now()
		}
	}
	return counts, nil
}

// JobProgress is a job at a glance, read off Kafka, the same from any
// machine.
type JobProgress struct {
	Record JobRecord
	// Answered is the requests answered (each once) so far.
	Answered int64
	// Waiting is the requests sent and not answered yet.
	Waiting  int64
	ByStatus map[string]int
}

// JobStatus is job's latest record and its answers written up to now, by
// status. Returns *NoJobRecord when the job has no record.
func (c *Client) JobStatus(job string) (*JobProgress, error) {
	record, err := c.JobRecord(job)
	if err != nil {
		return nil, err
	}
	if record == nil {
		return nil, &NoJobRecord{Job: job, Topic: c.JobsTopic()}
	}
	r, err := c.newReading()
	if err != nil {
		return nil, err
	}
	defer r.close()
	starts, ends, err := r.answersFrom(record.AnswersTopic, record.answersFromMs())
	if err != nil {
		return nil, err
	}
	for p := range ends {
		if err := r.add(record.AnswersTopic, p, starts[p]); err != nil {
			return nil, err
		}
	}
	seen := map[string]string{}
	err = r.readToEnds(record.AnswersTopic, ends, func(m *sarama.ConsumerMessage) {
		if id, status, ok := answerOf(m, job); ok && seen[id] == "" {
			seen[id] = status
		}
	})
	if err != nil {
		return nil, err
	}
	progress := &JobProgress{Record: *record, Answered: int64(len(seen)), ByStatus: map[string]int{}}
	for _, status := range Statuses {
		progress.ByStatus[status] = 0
	}
	for _, status := range seen {
		progress.ByStatus[status]++
	}
	progress.Waiting = max64(0, record.Requests-progress.Answered)
	return progress, nil
}

// namesKafka says a ce_fleetreplyto value includes Kafka.
func namesKafka(replyTo string) bool {
	for _, word := range strings.Split(replyTo, ",") {
		if strings.TrimSpace(word) == ReplyKafka {
			return true
		}
	}
	return false
}

// lineOf is the input line a request id names when it was made from one
// (<job>-<n>, as SendJob and fleet-produce bulk make them); nil for any
// other id.
func lineOf(job, id string) *uint64 {
	if !strings.HasPrefix(id, job+"-") {
		return nil
	}
	rest := id[len(job)+1:]
	for _, b := range []byte(rest) {
		if b < '0' || b > '9' {
			return nil
		}
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// collectedLine is one line of a collected job.
type collectedLine struct {
	RequestID string          `json:"request_id"`
	Line      *uint64         `json:"line"`
	Status    string          `json:"status"`
	Answer    json.RawMessage `json:"answer"`
}

// answerLine holds the answer as the worker wrote it when it is JSON, as a
// string when not.
func answerLine(job, id, status string, value []byte) collectedLine {
	answer := json.RawMessage(value)
	if !json.Valid(value) {
		answer, _ = json.Marshal(string(value))
	}
	return collectedLine{RequestID: id, Line: lineOf(job, id), Status: status, Answer: answer}
}

// answerOf is the request id and status of an answer record of job, from
// its key and headers alone; ok false for another job's answer or a record
// that is not a fleet answer.
func answerOf(m *sarama.ConsumerMessage, job string) (id, status string, ok bool) {
	find := func(name string) []byte {
		for _, h := range m.Headers {
			if h != nil && strings.EqualFold(string(h.Key), name) {
				return h.Value
			}
		}
		return nil
	}
	if string(find(JobHeader)) != job {
		return "", "", false
	}
	raw := m.Key
	if len(raw) == 0 {
		raw = find("ce_id")
	}
	id, status = string(raw), string(find(StatusHeader))
	if checkID("request id", id) != nil || !isStatus(status) {
		return "", "", false
	}
	return id, status, true
}

// openAnswersFile opens a JSON lines file of collected answers for
// appending: the requests it holds already (request id -> status) and the
// file. A last line without its newline (a collector killed while writing
// it) is cut off; a line that is not a collected answer is an error (it is
// not such a file).
func openAnswersFile(path string) (map[string]string, *os.File, error) {
	held := map[string]string{}
	var whole int64
	existing, err := os.Open(path)
	switch {
	case err == nil:
		defer existing.Close()
		reader := bufio.NewReader(existing)
		for number := 1; ; number++ {
			raw, err := reader.ReadBytes('\n')
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, nil, err
			}
			var entry struct {
				RequestID *string `json:"request_id"`
				Status    string  `json:"status"`
			}
			reason := "no request_id, or no known status"
			if err := json.Unmarshal(raw, &entry); err != nil {
				reason = err.Error()
			} else if entry.RequestID != nil && isStatus(entry.Status) {
				reason = ""
			}
			if reason != "" {
				return nil, nil, fmt.Errorf("%s: line %d is not a collected answer (%s); is this another file?",
					path, number, reason)
			}
			if held[*entry.RequestID] == "" {
				held[*entry.RequestID] = entry.Status
			}
			whole += int64(len(raw))
		}
	case !os.IsNotExist(err):
		return nil, nil, err
	}
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	if err := out.Truncate(whole); err != nil {
		out.Close()
		return nil, nil, err
	}
	return held, out, nil
}

// reading is a reader of the jobs and answers topics: partitions it
// assigns itself, read as one stream, in no consumer group and committing
// nothing, so reading a job leaves no trace.
type reading struct {
	client   sarama.Client
	consumer sarama.Consumer
	parts    []sarama.PartitionConsumer
	messages chan *sarama.ConsumerMessage
	errs     chan error
	done     chan struct{}
	wg       sync.WaitGroup
}

func (c *Client) newReading() (*reading, error) {
	config := sarama.NewConfig()
	config.Version = sarama.V2_0_0_0 // headers, and offsets for times
	config.Consumer.Return.Errors = true
	client, err := sarama.NewClient(c.brokers, config)
	if err != nil {
		return nil, err
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &reading{client: client, consumer: consumer, messages: make(chan *sarama.ConsumerMessage),
		errs: make(chan error), done: make(chan struct{})}, nil
}

// partitions of topic; an error naming it when it does not exist.
func (r *reading) partitions(topic string) ([]int32, error) {
	partitions, err := r.client.Partitions(topic)
	if err == nil && len(partitions) == 0 {
		err = sarama.ErrUnknownTopicOrPartition
	}
	if err != nil {
		return nil, fmt.Errorf("the topic %s (create the release's topics: fleet-produce topics): %w", topic, err)
	}
	return partitions, nil
}

// add reads partition of topic from offset on, into the stream.
func (r *reading) add(topic string, partition int32, offset int64) error {
	pc, err := r.consumer.ConsumePartition(topic, partition, offset)
	if err != nil {
		return fmt.Errorf("reading %s/%d from %d: %w", topic, partition, offset, err)
	}
	r.parts = append(r.parts, pc)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			select {
			case m := <-pc.Messages():
				select {
				case r.messages <- m:
				case <-r.done:
					return
				}
			case e := <-pc.Errors():
				select {
				case r.errs <- e:
				case <-r.done:
					return
				}
			case <-r.done:
				return
			}
		}
	}()
	return nil
}

// next is the next message of any partition added, or nil when none came
// within wait. Messages of one partition come in order.
func (r *reading) next(wait time.Duration) (*sarama.ConsumerMessage, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case m := <-r.messages:
		return m, nil
	case err := <-r.errs:
		return nil, err
	case <-timer.C:
		return nil, nil
	}
}

// readToEnds hands each message to each until every partition of topic in
// ends (partition -> high watermark) is read to its end.
func (r *reading) readToEnds(topic string, ends map[int32]int64, each func(*sarama.ConsumerMessage)) error {
	unread := make(map[int32]int64, len(ends))
	for p, end := range ends {
		unread[p] = end
	}
	deadline := time.Now().Add(readToEndTimeout)
	for len(unread) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("reading %s to its end took longer than %v", topic, readToEndTimeout)
		}
		m, err := r.next(left)
		if err != nil {
			return err
		}
		if m == nil {
			continue
		}
		each(m)
		if end, ok := unread[m.Partition]; ok && m.Offset+1 >= end {
			delete(unread, m.Partition)
		}
	}
	return nil
}

// answersFrom is where to read topic from for records written at or after
// fromMs (Kafka's offsets for times, on every partition), and the end
// (high watermark) now of each partition that has some.
func (r *reading) answersFrom(topic string, fromMs int64) (starts, ends map[int32]int64, err error) {
	partitions, err := r.partitions(topic)
	if err != nil {
		return nil, nil, err
	}
	starts, ends = map[int32]int64{}, map[int32]int64{}
	for _, p := range partitions {
		// The end first: a partition with no record that young yet is read
		// from its end as of before the lookup, so nothing written in
		// between is missed.
		high, err := r.client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, nil, err
		}
		start, err := r.client.GetOffset(topic, p, fromMs)
		if err != nil {
			return nil, nil, err
		}
		if start < 0 {
			start = high
		}
		starts[p] = start
		if start < high {
			ends[p] = high
		}
	}
	return starts, ends, nil
}

func (r *reading) close() {
	close(r.done)
	r.wg.Wait()
	for _, pc := range r.parts {
		pc.Close()
	}
	r.consumer.Close()
	r.client.Close()
}
