// The client itself: its options, the connections New opens (a producer
// and a Redis pool) and Close releases. What it does with them lives in the
// files named after each task (send.go, answers.go, jobs.go, collect.go).

package fleetclient

import (
	"sync"
	"time"

	"github.com/Shopify/sarama"
	"github.com/gomodule/redigo/redis"
)

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

// Close releases the producer and the Redis connections.
func (c *Client) Close() error {
	err := c.producer.Close()
	c.redis.Close()
	return err
}
