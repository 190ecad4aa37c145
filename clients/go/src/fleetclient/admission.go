// Admission: refusing a request whose predicted wait (the workers' backlog
// divided by their drain rate) would outlast its deadline, the rule of the
// Rust producer's BacklogGuard, before anything is sent.

package fleetclient

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

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
