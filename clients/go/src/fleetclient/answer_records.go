// Answer records on an answers topic, as Collect and JobStatus read them:
// which job and request a record answers, and with what status, from its key
// and headers alone.

package fleetclient

import (
	"strings"

	"github.com/Shopify/sarama"
)

// namesKafka says a ce_fleetreplyto value includes Kafka.
func namesKafka(replyTo string) bool {
	for _, word := range strings.Split(replyTo, ",") {
		if strings.TrimSpace(word) == ReplyKafka {
			return true
		}
	}
	return false
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

// countByStatus counts answers (request id -> status) by status, every
// status present.
func countByStatus(answers map[string]string) map[string]int {
	counts := make(map[string]int, len(Statuses))
	for _, status := range Statuses {
		counts[status] = 0
	}
	for _, status := range answers {
		counts[status]++
	}
	return counts
}
