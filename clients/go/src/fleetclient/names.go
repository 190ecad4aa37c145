// Where things are: the topics of a model's lanes and of jobs, and the Redis
// keys of a request's answers, a job's cancel mark and a model's backlog,
// all under the release's prefixes (Options).

package fleetclient

// Topic is where interactive requests for model go: infer.<model>.
func (c *Client) Topic(model string) string { return c.opts.TopicPrefix + model }

// LaneTopic is where requests for model in lane go: infer.<model> or
// infer.<model>.bulk; an error for a lane that is neither.
func (c *Client) LaneTopic(model string, lane Lane) (string, error) {
	suffix, err := laneSuffix(lane)
	if err != nil {
		return "", err
	}
	return c.opts.TopicPrefix + model + suffix, nil
}

// AnswersTopic is where workers put the answers of model's lane that go to
// Kafka: infer.<model>.answers or infer.<model>.bulk.answers.
func (c *Client) AnswersTopic(model string, lane Lane) (string, error) {
	topic, err := c.LaneTopic(model, lane)
	if err != nil {
		return "", err
	}
	return topic + ".answers", nil
}

// JobsTopic holds every job's record, keyed by job id (compacted):
// infer.fleet.jobs.
func (c *Client) JobsTopic() string { return c.opts.TopicPrefix + "fleet.jobs" }

// ResultKey is the hash of a request's answers; the braces are its hash tag.
func (c *Client) ResultKey(id string) string { return c.opts.RedisPrefix + "result:{" + id + "}" }

// ReadyKey is the list a worker pushes to once per answer.
func (c *Client) ReadyKey(id string) string { return c.opts.RedisPrefix + "ready:{" + id + "}" }

// CancelKey is present while job is cancelled; the braces are its hash tag.
func (c *Client) CancelKey(job string) string { return c.opts.RedisPrefix + "cancel:{" + job + "}" }

// BacklogKey is the hash of the model's workers' backlog reports.
func (c *Client) BacklogKey(model string) string { return c.opts.RedisPrefix + "backlog:" + model }
