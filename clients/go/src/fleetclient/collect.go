// Collect: a job's answers from its answers topic into a JSON lines file,
// resumable and each request once. The steps are the job's record, the file
// (what it holds already), the reading of both topics and the loop that
// follows them until the record's count is met.

package fleetclient

import (
	"bufio"
	"encoding/json"
	"fmt"
	"time"

	"github.com/Shopify/sarama"
)

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
	record, jobsEnds, err := c.collectableRecord(job)
	if err != nil {
		return nil, err
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
	col := &collection{job: job, path: path, jobsTopic: c.JobsTopic(), record: record, held: held,
		counts: countByStatus(held)}
	if col.done() {
		return col.counts, nil
	}
	r, err := c.followJob(record, jobsEnds)
	if err != nil {
		return col.counts, err
	}
	defer r.close()
	return col.counts, col.follow(r, w, started, timeout)
}

// collectableRecord is job's latest record and where readRecord stopped on
// the jobs topic; an error when it has none, or when its answers do not go
// to Kafka (nothing there to collect).
func (c *Client) collectableRecord(job string) (*JobRecord, map[int32]int64, error) {
	record, jobsEnds, err := c.readRecord(job)
	if err != nil {
		return nil, nil, err
	}
	if record == nil {
		return nil, nil, &NoJobRecord{Job: job, Topic: c.JobsTopic()}
	}
	if record.ReplyTo != nil && !namesKafka(*record.ReplyTo) {
		return nil, nil, fmt.Errorf(
			"job %s's requests asked for their answers in %s: only answers on Kafka can be collected",
			job, *record.ReplyTo)
	}
	return record, jobsEnds, nil
}

// followJob reads record's answers topic from where its answers can start,
// and the jobs topic from where readRecord stopped (jobsEnds): each later
// record of the job (its final count) is seen.
func (c *Client) followJob(record *JobRecord, jobsEnds map[int32]int64) (*reading, error) {
	r, err := c.newReading()
	if err != nil {
		return nil, err
	}
	add := func() error {
		starts, _, err := r.answersFrom(record.AnswersTopic, record.answersFromMs())
		if err != nil {
			return err
		}
		for p, offset := range starts {
			if err := r.add(record.AnswersTopic, p, offset); err != nil {
				return err
			}
		}
		for p, end := range jobsEnds {
			if err := r.add(c.JobsTopic(), p, end); err != nil {
				return err
			}
		}
		return nil
	}
	if err := add(); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// collection is one Collect under way: the job's latest record, and the
// requests its file holds (request id -> status), counted by status.
type collection struct {
	job, path, jobsTopic string
	record               *JobRecord
	held                 map[string]string
	counts               map[string]int
}

// done says the record is final and the file holds as many answers as it
// counts.
func (col *collection) done() bool {
	return col.record.Complete() && int64(len(col.held)) >= col.record.Requests
}

// follow takes the stream's messages into the file until done, or returns
// *JobTimeout once timeout (0: none) has passed since started.
func (col *collection) follow(r *reading, w *bufio.Writer, started time.Time, timeout time.Duration) error {
	encoder := json.NewEncoder(w)
	encoder.SetEscapeHTML(false) // the answer as the worker wrote it
	flushed := time.Now()
	for !col.done() {
		wait := time.Second
		if timeout > 0 {
			left := timeout - time.Since(started)
			if left <= 0 {
				return &JobTimeout{Job: col.job, Collected: len(col.held), Record: *col.record, After: timeout}
			}
			if left < wait {
				wait = left
			}
		}
		m, err := r.next(wait)
		if err != nil {
			return err
		}
		if err := col.take(m, encoder); err != nil {
			return err
		}
		if time.Since(flushed) >= time.Second {
			// A collector killed now loses at most a second's lines.
			if err := w.Flush(); err != nil {
				return fmt.Errorf("%s: %w", col.path, err)
			}
			flushed = time.Now()
		}
	}
	return nil
}

// take is one message of the stream (nil: none came): a later record of the
// job, or an answer of a request the file does not hold yet, written to it.
func (col *collection) take(m *sarama.ConsumerMessage, encoder *json.Encoder) error {
	if m == nil {
		return nil
	}
	if m.Topic == col.jobsTopic {
		if string(m.Key) == col.job {
			if latest := parseRecord(m.Value); latest != nil {
				col.record = latest
			}
		}
		return nil
	}
	id, status, ok := answerOf(m, col.job)
	if !ok || col.held[id] != "" {
		return nil
	}
	col.held[id] = status
	col.counts[status]++
	if err := encoder.Encode(answerLine(col.job, id, status, m.Value)); err != nil {
		return fmt.Errorf("%s: %w", col.path, err)
	}
	return nil
}
