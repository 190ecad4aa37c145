// Jobs on Kafka: the job record on the jobs topic, SendJob that writes it
// around a job's requests, and reading a job's latest record back.

package fleetclient

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"encoding/json"
	"github.com/Shopify/sarama"
)

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
