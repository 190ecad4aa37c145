// Job status: a job's progress at a glance, its record and its answers on
// Kafka so far, read without collecting them.

package fleetclient

import (
	"github.com/Shopify/sarama"
)

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
	answered := int64(len(seen))
	return &JobProgress{Record: *record, Answered: answered, Waiting: max64(0, record.Requests-answered),
		ByStatus: countByStatus(seen)}, nil
}
