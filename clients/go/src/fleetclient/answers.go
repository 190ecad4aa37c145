// Answers in Redis: the answer type, Poll (what is there now) and Wait
// (BLPOP on the ready list until every model answered).

package fleetclient

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"encoding/json"
	"github.com/gomodule/redigo/redis"
)

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

// Timeout is returned when not every model answered in time.
type Timeout struct {
	ID      string
	Missing []string
}

func (e *Timeout) Error() string {
	return fmt.Sprintf("request %s: no answer from %v", e.ID, e.Missing)
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
