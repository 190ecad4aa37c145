// Reading the jobs and answers topics: a reader that assigns partitions to
// itself (no consumer group, nothing committed) and merges them into one
// stream, so that reading a job leaves no trace.

package fleetclient

import (
	"fmt"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

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
