// Sending: one request, a text, a fan-out to several models, and the cancel
// mark that stops a job's requests not computed yet.

package fleetclient

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/Shopify/sarama"
)

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
