package streams

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Every record Switchyard produces carries two headers that say how to
// read its value without knowing the topic (docs/topics.md):
//
//	content-type: application/x-protobuf   (application/json for checkpoints)
//	message:      switchyard.v1.<Message>  (the checkpoint's Go type for JSON)
//
// Consumers find the message in the descriptor set (`switchyard schema
// export`).

// ProtoHeaders returns the headers of a record whose value is msg
// encoded as protobuf. The slice is new; its values may be shared.
func ProtoHeaders(msg proto.Message) []kgo.RecordHeader {
	return Headers(schemas.ContentTypeProtobuf, schemas.MessageName(msg))
}

// Headers returns the content-type and message headers.
func Headers(contentType, message string) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: schemas.HeaderContentType, Value: []byte(contentType)},
		{Key: schemas.HeaderMessage, Value: []byte(message)},
	}
}

// Header returns the value of rec's header key (the last one when it
// repeats) and whether rec has it.
func Header(rec *kgo.Record, key string) (string, bool) {
	for i := len(rec.Headers) - 1; i >= 0; i-- {
		if rec.Headers[i].Key == key {
			return string(rec.Headers[i].Value), true
		}
	}
	return "", false
}
