// Command fleetcheck runs the Go client against a live fleet and checks what
// it gets back: the same checks as clients/python/check_client.py. Started by
// crates/fleet-worker/tests/clients.rs (part of `make test`) with a broker,
// a Redis and two real workers (minilm, efficientnet_lite0; each reading its
// bulk topic, infer.<model>.bulk, too). Exits non-zero
// with the reason on the first check that fails; prints one line per check.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"fleetclient"

	"github.com/Shopify/sarama"
	"github.com/gomodule/redigo/redis"
)

var texts = []string{
	"A man is eating food.",
	"A man is eating a piece of bread.",
	"The girl is carrying a baby.",
	"A man is riding a horse.",
}

// jobTexts are a job's texts (SendJob, Collect): the four above and two more.
var jobTexts = append(append([]string{}, texts...), "A woman is playing the violin.", "Two dogs run across a field.")

func check(ok bool, what string) {
	if !ok {
		fmt.Printf("FAILED: %s\n", what)
		os.Exit(1)
	}
	fmt.Printf("ok: %s\n", what)
}

func must(err error, what string) {
	if err != nil {
		fmt.Printf("FAILED: %s: %v\n", what, err)
		os.Exit(1)
	}
}

func embedding(a fleetclient.Answer) []float64 {
	var out struct {
		Embedding []float64 `json:"embedding"`
	}
	_ = json.Unmarshal(a.Output, &out)
	return out.Embedding
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func main() {
	brokers := flag.String("brokers", "", "bootstrap broker")
	redisURL := flag.String("redis", "", "Redis URL")
	photo := flag.String("photo", "", "a PNG of a cup of coffee")
	run := flag.String("run", strconv.FormatInt(time.Now().UnixMilli(), 10), "makes request ids unique")
	flag.Parse()
	started := time.Now()
	client, err := fleetclient.New([]string{*brokers}, *redisURL, fleetclient.Options{Source: "check-go-client"})
	must(err, "connecting")
	defer client.Close()
	wait := func(id string, models ...string) map[string]fleetclient.Answer {
		answers, err := client.Wait(id, models, 60*time.Second)
		must(err, "waiting for "+id)
		return answers
	}

	// Send and wait.
	var embeddings [][]float64
	for i, text := range texts {
		id := fmt.Sprintf("go-%s-%d", *run, i)
		must(client.SendText("minilm", id, text, fleetclient.SendOptions{}), "sending "+id)
	}
	for i := range texts {
		id := fmt.Sprintf("go-%s-%d", *run, i)
		answer := wait(id, "minilm")["minilm"]
		check(answer.Status == "ok", id+" answered ok")
		t := answer.TimingsMs
		check(t != nil && t.Queue >= 0 && t.Infer >= 0 && t.Total >= 0, id+" carries timings_ms (queue, infer, total)")
		embeddings = append(embeddings, embedding(answer))
	}
	for _, e := range embeddings {
		check(len(e) == 384 && math.Abs(math.Sqrt(dot(e, e))-1) < 1e-2, "a unit-length 384-dimensional embedding")
	}
	check(dot(embeddings[0], embeddings[1]) > dot(embeddings[0], embeddings[3]),
		"eating food is nearer to eating bread than to riding a horse")

	// Fan-out: the photo to the vision model, its caption to the text model.
	image, err := os.ReadFile(*photo)
	must(err, "reading the photo")
	both := fmt.Sprintf("go-%s-fanout", *run)
	must(client.SendFanout(both, []fleetclient.Part{
		{Model: "efficientnet_lite0", Value: image, ContentType: "image/png"},
		{Model: "minilm", Value: []byte("A cup of coffee."), ContentType: fleetclient.Text},
	}, fleetclient.SendOptions{}), "sending the fan-out")
	answers := wait(both, "efficientnet_lite0", "minilm")
	var classes struct {
		Classes []struct {
			Label string `json:"label"`
		} `json:"classes"`
	}
	_ = json.Unmarshal(answers["efficientnet_lite0"].Output, &classes)
	check(len(classes.Classes) > 0 && classes.Classes[0].Label == "espresso", "the photo is an espresso")
	check(answers["minilm"].Status == "ok", "the caption answered in the same request")

	// A reused id within the result TTL gets the earlier answer back.
	reused := fmt.Sprintf("go-%s-3", *run)
	must(client.SendText("minilm", reused, "Something else entirely.", fleetclient.SendOptions{}), "resending")
	check(reflect.DeepEqual(embedding(wait(reused, "minilm")["minilm"]), embeddings[3]),
		"a reused request id returns the earlier answer")

	// Predicted-wait admission against a planted report of a deep backlog.
	admin, err := redis.DialURL(*redisURL)
	must(err, "connecting as admin")
	defer admin.Close()
	key := client.BacklogKey("minilm")
	_, err = admin.Do("HSET", key, "check-go-planted", fmt.Sprintf("100000 %d 10.0", time.Now().UnixMilli()))
	must(err, "planting a report")
	refused := fmt.Sprintf("go-%s-refused", *run)
	err = client.SendText("minilm", refused, "Too late anyway.",
		fleetclient.SendOptions{DeadlineMs: time.Now().UnixMilli() + 5_000, Admit: true})
	var overloaded *fleetclient.Overloaded
	check(errors.As(err, &overloaded) && overloaded.PredictedWait > 5*time.Second,
		fmt.Sprintf("refused before sending: %v", err))
	_, err = admin.Do("HDEL", key, "check-go-planted")
	must(err, "removing the report")
	admitted := fmt.Sprintf("go-%s-admitted", *run)
	must(client.SendText("minilm", admitted, "Now there is room.",
		fleetclient.SendOptions{DeadlineMs: time.Now().UnixMilli() + 30_000, Admit: true}), "admitted")
	check(wait(admitted, "minilm")["minilm"].Status == "ok", "admitted and answered")

	// Lanes, jobs and replies: the client refuses, before sending, a lane, a
	// job id or a reply destination the fleet would not accept.
	notSent := fmt.Sprintf("go-%s-not-sent", *run)
	for _, opt := range []fleetclient.SendOptions{
		{Lane: "urgent"}, {Job: "bad job!"}, {Job: strings.Repeat("j", 129)},
		{ReplyTo: "s3"}, {ReplyTo: " , "}, {ReplyTo: "kafka:infer.minilm.answers"},
	} {
		err := client.SendText("minilm", notSent, "Never sent.", opt)
		check(err != nil, fmt.Sprintf("the client refuses lane %q job %.20q reply-to %q: %v",
			opt.Lane, opt.Job, opt.ReplyTo, err))
	}
	check(client.Cancel("bad job!", 0) != nil, "the client refuses to cancel an invalid job id")
	refusedLocally, err := client.Poll(notSent)
	must(err, "polling "+notSent)
	check(len(refusedLocally) == 0, "nothing the client refused was sent")

	// (a) The bulk lane (infer.minilm.bulk), in a job: answered like the
	// interactive lane. Its answers go to Kafka unless a request asks for
	// Redis too (ce_fleetreplyto), as this one does to be waited on.
	bulkID := fmt.Sprintf("go-%s-bulk", *run)
	must(client.SendText("minilm", bulkID, texts[0], fleetclient.SendOptions{
		Lane: fleetclient.Bulk, Job: fmt.Sprintf("go-%s-job", *run), ReplyTo: "redis,kafka"}), "sending on the bulk lane")
	bulk := wait(bulkID, "minilm")["minilm"]
	check(bulk.Status == fleetclient.StatusOK, "a text on the bulk lane, in a job, answered ok (got "+bulk.Status+")")
	check(dot(embedding(bulk), embeddings[0]) > 0.99, "the bulk lane computes the same embedding")

	// (b) A job cancelled before its requests are sent: each is answered
	// cancelled, never computed (no output, no error); in Redis, asked for.
	job := fmt.Sprintf("go-%s-cancelled", *run)
	must(client.Cancel(job, 0), "cancelling "+job)
	ttl, err := redis.Int64(admin.Do("TTL", client.CancelKey(job)))
	must(err, "reading the cancel's TTL")
	check(ttl > 0 && ttl <= int64(fleetclient.DefaultCancelKeep.Seconds()),
		fmt.Sprintf("cancel marks %s for a week (ttl %d s)", client.CancelKey(job), ttl))
	var cancelled []string
	for i, text := range texts[:3] {
		id := fmt.Sprintf("go-%s-cancelled-%d", *run, i)
		must(client.SendText("minilm", id, text,
			fleetclient.SendOptions{Lane: fleetclient.Bulk, Job: job, ReplyTo: fleetclient.ReplyRedis}), "sending "+id)
		cancelled = append(cancelled, id)
	}
	for _, id := range cancelled {
		a := wait(id, "minilm")["minilm"]
		check(a.Status == fleetclient.StatusCancelled && len(a.Output) == 0 && a.Error == nil && a.TimingsMs != nil,
			id+" of the cancelled job answered cancelled (got "+a.Status+")")
	}

	// (c) An invalid job id, sent raw (the client would refuse it): answered
	// error bad_request.
	rawID := fmt.Sprintf("go-%s-bad-job", *run)
	config := sarama.NewConfig()
	config.Version = sarama.V2_0_0_0 // headers
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	raw, err := sarama.NewSyncProducer([]string{*brokers}, config)
	must(err, "connecting a raw producer")
	defer raw.Close()
	header := func(k, v string) sarama.RecordHeader { return sarama.RecordHeader{Key: []byte(k), Value: []byte(v)} }
	_, _, err = raw.SendMessage(&sarama.ProducerMessage{
		Topic: client.Topic("minilm"),
		Key:   sarama.StringEncoder(rawID),
		Value: sarama.StringEncoder("A request whose job id is not valid."),
		Headers: []sarama.RecordHeader{
			header("ce_specversion", "1.0"),
			header("ce_type", "fleet.infer.v1"),
			header("ce_id", rawID),
			header("ce_source", "check-go-client"),
			header("ce_time", time.Now().UTC().Format("2006-01-02T15:04:05.000Z")),
			header("content-type", fleetclient.Text),
			header(fleetclient.JobHeader, "bad job!"),
		},
	})
	must(err, "sending the raw request with an invalid job id")
	bad := wait(rawID, "minilm")["minilm"]
	code := ""
	if bad.Error != nil {
		code = bad.Error.Code
	}
	check(bad.Status == fleetclient.StatusError && code == "bad_request",
		fmt.Sprintf("an invalid job id is answered error bad_request (got %s %s)", bad.Status, code))

	checkCollectedJob(client, *run, embeddings[0])
	fmt.Printf("all checks passed in %.1f s\n", time.Since(started).Seconds())
}

// checkCollectedJob: (d) a job sent with SendJob and collected off Kafka
// (the bulk lane's answers go to infer.minilm.bulk.answers by default): one
// line per request, each once; collecting again, or after a kill cut the
// file mid-line, completes it without a repeat.
func checkCollectedJob(client *fleetclient.Client, run string, firstEmbedding []float64) {
	job := fmt.Sprintf("go-%s-collected", run)
	n := len(jobTexts)
	delivered, err := client.SendJob("minilm", jobTexts, job, "")
	must(err, "sending job "+job)
	check(delivered == n, fmt.Sprintf("SendJob sent %d requests of %s (delivered %d)", n, job, delivered))
	record, err := client.JobRecord(job)
	must(err, "reading the record of "+job)
	answersTopic, _ := client.AnswersTopic("minilm", fleetclient.Bulk)
	check(record != nil && record.Complete() && record.Requests == int64(n) && record.AnswersTopic == answersTopic,
		fmt.Sprintf("%s holds the job's final record (got %+v)", client.JobsTopic(), record))

	folder, err := os.MkdirTemp("", "fleetcheck-")
	must(err, "making a temporary folder")
	defer os.RemoveAll(folder)
	path := filepath.Join(folder, "answers.jsonl")
	type row struct {
		RequestID string `json:"request_id"`
		Line      *int   `json:"line"`
		Status    string `json:"status"`
		Answer    struct {
			Output struct {
				Embedding []float64 `json:"embedding"`
			} `json:"output"`
		} `json:"answer"`
	}
	collected := func() []row {
		raw, err := os.ReadFile(path)
		must(err, "reading "+path)
		var rows []row
		for _, line := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
			var r row
			must(json.Unmarshal(line, &r), "a collected line")
			rows = append(rows, r)
		}
		return rows
	}
	distinct := func(rows []row) int {
		ids := map[string]bool{}
		for _, r := range rows {
			ids[r.RequestID] = true
		}
		return len(ids)
	}

	counts, err := client.Collect(job, path, 120*time.Second)
	must(err, "collecting "+job)
	rows := collected()
	check(len(rows) == n, fmt.Sprintf("Collect wrote %d lines (got %d)", n, len(rows)))
	check(distinct(rows) == n, "one line per request id")
	allOK, all384 := true, true
	var lines []int
	for _, r := range rows {
		allOK = allOK && r.Status == fleetclient.StatusOK
		all384 = all384 && len(r.Answer.Output.Embedding) == 384
		if r.Line != nil {
			lines = append(lines, *r.Line)
		}
		if r.Line != nil && *r.Line == 1 {
			check(dot(r.Answer.Output.Embedding, firstEmbedding) > 0.99, "line 1 is the first text's embedding")
		}
	}
	check(allOK, fmt.Sprintf("every answer of the job is ok (counts %v)", counts))
	check(all384, "every collected answer holds a 384-dimensional embedding")
	sort.Ints(lines)
	check(reflect.DeepEqual(lines, []int{1, 2, 3, 4, 5, 6}), fmt.Sprintf("each line names its text (got %v)", lines))
	want := map[string]int{fleetclient.StatusOK: n, fleetclient.StatusError: 0, fleetclient.StatusExpired: 0,
		fleetclient.StatusCancelled: 0}
	check(reflect.DeepEqual(counts, want), fmt.Sprintf("counts %v", counts))

	again, err := client.Collect(job, path, 60*time.Second)
	must(err, "collecting "+job+" again")
	check(len(collected()) == n && reflect.DeepEqual(again, counts), "collecting again adds no line")

	raw, err := os.ReadFile(path)
	must(err, "reading "+path)
	// A kill in the middle of a line: ten bytes into the one after the middle.
	cut := len(raw)/2 + bytes.IndexByte(raw[len(raw)/2:], '\n') + 10
	if cut > len(raw) {
		cut = len(raw)
	}
	must(os.WriteFile(path, raw[:cut], 0o644), "cutting "+path)
	_, err = client.Collect(job, path, 120*time.Second)
	must(err, "collecting "+job+" after a cut")
	rows = collected()
	check(len(rows) == n && distinct(rows) == n,
		fmt.Sprintf("a file cut mid-line is completed, each request once (got %d lines)", len(rows)))

	progress, err := client.JobStatus(job)
	must(err, "the status of "+job)
	check(progress.Answered == int64(n) && progress.Waiting == 0, fmt.Sprintf("JobStatus: %v", progress.ByStatus))
}
