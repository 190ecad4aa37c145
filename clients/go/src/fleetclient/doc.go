// Package fleetclient is a Go client of the inference fleet (docs/clients.md,
// docs/protocol.md): it sends requests to the model topics with Sarama
// (CloudEvents 1.0, binary mode: the raw input as the value, metadata in
// headers) and waits for the answers in Redis with Redigo (BLPOP on the
// request's ready list, then HGETALL of its result hash).
//
// Lanes and jobs: SendOptions{Lane: Bulk} sends to the model's bulk topic
// (infer.<model>.bulk), which workers serve with the capacity interactive
// requests leave; SendOptions{Job: "backfill-7"} tags a request with a job
// (header ce_fleetjob), and Cancel("backfill-7", 0) makes workers answer
// every request of that job they have not computed yet with status
// "cancelled".
//
// Admit refuses a request whose predicted wait (the workers' backlog divided
// by their drain rate) would outlast its deadline: the rule of the Rust
// producer's BacklogGuard, so a refused request is never sent only to expire.
//
// Where answers go: SendOptions{ReplyTo: "kafka"} (header ce_fleetreplyto:
// redis, kafka or redis,kafka) asks for the answer on the model's answers
// topic (infer.<model>[.bulk].answers) instead of, or beside, Redis; ""
// leaves it to the lane's default (interactive: Redis, bulk: Kafka). A job
// sent with SendJob is collected from Kafka, hours later or on another
// machine, with Collect: resumable, each request once.
package fleetclient
