// amqp_load: a compiled AMQP 0-9-1 load generator for bench/amqp_throughput.py, so that the
// benchmark measures the server rather than a Python client.
//
// Modes (each prints JSON lines on stdout):
//
//	publish  -url U -queue PREFIX -queues Q -messages N -size S -window W
//	         N persistent messages of S bytes, round-robin over the durable queues
//	         PREFIX-0 .. PREFIX-(Q-1), publisher confirms with at most W unconfirmed.
//	consume  -url U -queue NAME -messages N -prefetch P -ack-every K
//	         N messages from one durable queue, manual acks, basic.qos P, ack multiple every K.
//	idle     -url U -connections N
//	         open N connections (handshake complete), hold them until stdin closes.
//
// publish and consume connect, declare, print {"event":"ready"} and start when a line arrives
// on stdin, so that several processes start together. They print {"event":"progress",
// "messages":n} every 250 ms and end with {"event":"done","messages":n,"seconds":s,...}.
// Build: GOPATH=/usr/share/gocode GO111MODULE=off go build -o amqp_load main.go
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func say(fields map[string]interface{}) {
	line, _ := json.Marshal(fields)
	fmt.Println(string(line))
}

func fail(err error) {
	say(map[string]interface{}{"event": "error", "error": err.Error()})
	os.Exit(1)
}

// waitForGo prints "ready" and blocks until a line (or EOF) arrives on stdin.
func waitForGo() {
	say(map[string]interface{}{"event": "ready"})
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// watch exits the process with an error line if the server closes the connection or channel.
func watch(conn *amqp.Connection, ch *amqp.Channel) {
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		select {
		case e := <-connClosed:
			if e != nil {
				fail(fmt.Errorf("connection closed by the server: %v", e))
			}
		case e := <-chClosed:
			if e != nil {
				fail(fmt.Errorf("channel closed by the server: %v", e))
			}
		}
	}()
}

// reportProgress prints the counter every 250 ms until stop is closed.
func reportProgress(counter *int64, stop <-chan struct{}) {
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ticker.C:
			say(map[string]interface{}{"event": "progress", "messages": atomic.LoadInt64(counter)})
		}
	}
}

func publish(url, prefix string, queues, messages, size, window int) {
	conn, err := amqp.Dial(url)
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		fail(err)
	}
	names := make([]string, queues)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		if _, err := ch.QueueDeclare(names[i], true, false, false, false, nil); err != nil {
			fail(err)
		}
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window))
	if err := ch.Confirm(false); err != nil {
		fail(err)
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = 'x'
	}
	tokens := make(chan struct{}, window)
	var confirmed, nacks int64
	finished := make(chan struct{})
	// sent[i] is when message i+1 (its delivery tag) went out; confirms carry the tag
	sent := make([]int64, messages)
	latencies := make([]float64, 0, messages)
	watch(conn, ch)
	waitForGo()
	stop := make(chan struct{})
	go reportProgress(&confirmed, stop)
	start := time.Now()
	go func() {
		for c := range confirms {
			<-tokens
			if !c.Ack {
				nacks++
			}
			if c.DeliveryTag >= 1 && c.DeliveryTag <= uint64(messages) {
				since := time.Now().UnixNano() - atomic.LoadInt64(&sent[c.DeliveryTag-1])
				latencies = append(latencies, float64(since)/1e6)
			}
			if atomic.AddInt64(&confirmed, 1) == int64(messages) {
				close(finished)
				return
			}
		}
	}()
	ctx := context.Background()
	for i := 0; i < messages; i++ {
		tokens <- struct{}{}
		atomic.StoreInt64(&sent[i], time.Now().UnixNano())
		msg := amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}
		if err := ch.PublishWithContext(ctx, "", names[i%queues], false, false, msg); err != nil {
			fail(err)
		}
	}
	if messages > 0 {
		<-finished
	}
	elapsed := time.Since(start).Seconds()
	close(stop)
	say(map[string]interface{}{
		"event": "done", "mode": "publish", "messages": confirmed, "nacks": nacks,
		"seconds": elapsed, "confirm_ms": percentiles(latencies),
	})
}

// percentiles of publish-to-confirm times in milliseconds (a confirm of multiple=true
// settles every earlier tag at once: each counts with the time it was settled).
func percentiles(values []float64) map[string]float64 {
	out := map[string]float64{}
	if len(values) == 0 {
		return out
	}
	sort.Float64s(values)
	for name, q := range map[string]float64{"p50": 0.50, "p90": 0.90, "p99": 0.99, "max": 1.0} {
		index := int(q * float64(len(values)-1))
		out[name] = values[index]
	}
	return out
}

func consume(url, queue string, messages, prefetch, ackEvery int, timeout time.Duration) {
	conn, err := amqp.Dial(url)
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		fail(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		fail(err)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		fail(err)
	}
	watch(conn, ch)
	waitForGo()
	var received int64
	stop := make(chan struct{})
	go reportProgress(&received, stop)
	start := time.Now()
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		fail(err)
	}
	var last uint64
	unacked := 0
	timer := time.NewTimer(timeout)
	for received < int64(messages) {
		select {
		case d, ok := <-deliveries:
			if !ok {
				fail(fmt.Errorf("delivery channel closed after %d messages", received))
			}
			last = d.DeliveryTag
			unacked++
			atomic.AddInt64(&received, 1)
			if unacked >= ackEvery {
				if err := ch.Ack(last, true); err != nil {
					fail(err)
				}
				unacked = 0
			}
			if !timer.Stop() {
				<-timer.C
			}
			timer.Reset(timeout)
		case <-timer.C:
			fail(fmt.Errorf("no message for %s after %d of %d", timeout, received, messages))
		}
	}
	if unacked > 0 {
		if err := ch.Ack(last, true); err != nil {
			fail(err)
		}
	}
	elapsed := time.Since(start).Seconds()
	close(stop)
	// a synchronous round trip, so that the server has seen every ack before we leave
	if _, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		fail(err)
	}
	say(map[string]interface{}{
		"event": "done", "mode": "consume", "messages": received, "seconds": elapsed,
	})
}

func idle(url string, connections int) {
	opened := make([]*amqp.Connection, 0, connections)
	start := time.Now()
	for i := 0; i < connections; i++ {
		conn, err := amqp.Dial(url)
		if err != nil {
			fail(fmt.Errorf("connection %d: %v", i, err))
		}
		opened = append(opened, conn)
		if (i+1)%100 == 0 {
			say(map[string]interface{}{"event": "progress", "messages": i + 1})
		}
	}
	say(map[string]interface{}{
		"event": "done", "mode": "idle", "connections": len(opened),
		"seconds": time.Since(start).Seconds(),
	})
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, conn := range opened {
		_ = conn.Close()
	}
}

func main() {
	mode := flag.String("mode", "publish", "publish, consume or idle")
	url := flag.String("url", "amqp://guest:guest@127.0.0.1:5672/", "AMQP URL")
	queue := flag.String("queue", "bench", "queue name (consume) or prefix (publish)")
	queues := flag.Int("queues", 1, "publish: round-robin over this many queues")
	messages := flag.Int("messages", 10000, "messages to publish or consume")
	size := flag.Int("size", 100, "message body size in bytes")
	window := flag.Int("window", 500, "most unconfirmed publishes")
	prefetch := flag.Int("prefetch", 500, "basic.qos prefetch count")
	ackEvery := flag.Int("ack-every", 100, "ack multiple every this many deliveries")
	timeout := flag.Duration("timeout", 60*time.Second, "consume: give up after this long idle")
	connections := flag.Int("connections", 1000, "idle: connections to open")
	flag.Parse()
	switch *mode {
	case "publish":
		publish(*url, *queue, *queues, *messages, *size, *window)
	case "consume":
		consume(*url, *queue, *messages, *prefetch, *ackEvery, *timeout)
	case "idle":
		idle(*url, *connections)
	default:
		fail(fmt.Errorf("unknown mode %q", *mode))
	}
}
