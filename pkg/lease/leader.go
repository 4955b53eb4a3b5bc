package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// leaderAPI sends STREAM.MSG.GET requests for one stream. jetstream.Stream
// turns every message get into a direct get once the stream allows them
// (KV buckets do), and any replica answers a direct get; the stream API's
// get is answered by the stream leader alone. Safe for concurrent use.
type leaderAPI struct {
	nc      *nats.Conn
	subject string        // <api prefix>STREAM.MSG.GET.<stream>
	timeout time.Duration // for a ctx without a deadline, as jetstream does
}

func newLeaderAPI(js jetstream.JetStream, stream string) leaderAPI {
	o := js.Options()
	return leaderAPI{nc: js.Conn(), subject: apiPrefix(o) + "STREAM.MSG.GET." + stream, timeout: o.DefaultTimeout}
}

// apiPrefix is the prefix js sends API requests under (jetstream keeps its
// own copy unexported): a domain's, a custom one, or the default.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// msgGetResponse is the stream API's answer to a message get.
type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string `json:"subject"`
		Sequence uint64 `json:"seq"`
		Header   []byte `json:"hdrs,omitempty"`
		Data     []byte `json:"data,omitempty"`
	} `json:"message,omitempty"`
}

// lastMsg returns the stream's last message on subject, as the leader has
// it; jetstream.ErrMsgNotFound when there is none.
func (a leaderAPI) lastMsg(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok && a.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, err
	}
	resp, err := a.nc.RequestWithContext(ctx, a.subject, req)
	if err != nil {
		return nil, err
	}
	var r msgGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("decode %s reply: %w", a.subject, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, r.Error
	}
	if r.Message == nil {
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	m := &jetstream.RawStreamMsg{Subject: r.Message.Subject, Sequence: r.Message.Sequence, Data: r.Message.Data}
	if len(r.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return nil, fmt.Errorf("decode %s reply headers: %w", a.subject, err)
		}
	}
	return m, nil
}
