// The wire contract (docs/protocol.md): header names, statuses, lanes and
// the rules a request id, a job id and a reply-to must follow. Shared by
// sending, collecting and job status, so it is checked the same way in each.

package fleetclient

import (
	"fmt"
	"regexp"
	"strings"
	"time"
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

func nowMs() int64 { return time.Now().UnixMilli() }

// rfc3339 is ce_time: UTC with milliseconds, e.g. 2026-12-02T17:00:00.123Z.
func rfc3339(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
