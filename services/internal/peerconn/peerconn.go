// Package peerconn adapts a *nats.Conn to peers.Conn, the connection the
// gateway library's load sharing takes without naming nats.go; the
// gateway and demo services share it.
package peerconn

import (
	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/gateway/peers"
)

// Conn is a *nats.Conn as a peers.Conn. Its subscriptions are
// *nats.Subscription, so a Sharer bounds their pending messages and
// counts their drops; IsConnected and MaxPayload are the connection's.
type Conn struct{ nc *nats.Conn }

var _ peers.Conn = Conn{}

// New returns nc as a peers.Conn. Closing nc stays the caller's job.
func New(nc *nats.Conn) Conn { return Conn{nc: nc} }

// Publish publishes data on subject (nats.go copies it before returning).
func (c Conn) Publish(subject string, data []byte) error { return c.nc.Publish(subject, data) }

// Subscribe calls fn with the payload of every message on subject, from
// the subscription's own delivery goroutine; each payload is fn's.
func (c Conn) Subscribe(subject string, fn func(data []byte)) (peers.Subscription, error) {
	sub, err := c.nc.Subscribe(subject, func(m *nats.Msg) { fn(m.Data) })
	if err != nil {
		return nil, err
	}
	return sub, nil
}

// IsConnected reports whether the connection is up now.
func (c Conn) IsConnected() bool { return c.nc.IsConnected() }

// MaxPayload is the largest message the server accepts, once connected.
func (c Conn) MaxPayload() int64 { return c.nc.MaxPayload() }
