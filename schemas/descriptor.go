package schemas

import (
	_ "embed"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// descriptorSet is switchyard.proto compiled by protoc with its comments
// (generate.sh), the FileDescriptorSet other languages decode with.
//
//go:embed switchyard.binpb
var descriptorSet []byte

// Package is the protobuf package of every Switchyard message; a record's
// "message" header is Package + "." + the message name.
const Package = "switchyard.v1"

// Record headers every record Switchyard produces carries.
const (
	// HeaderContentType is the content-type header's key.
	HeaderContentType = "content-type"
	// HeaderMessage names the message type of a protobuf value
	// (MessageName).
	HeaderMessage = "message"
	// ContentTypeProtobuf is the content type of protobuf values.
	ContentTypeProtobuf = "application/x-protobuf"
	// ContentTypeJSON is the content type of JSON values (the processor's
	// checkpoints).
	ContentTypeJSON = "application/json"
)

// DescriptorSet returns a copy of the FileDescriptorSet of
// switchyard.proto, with source comments.
func DescriptorSet() []byte { return append([]byte(nil), descriptorSet...) }

// DescriptorSetProto decodes DescriptorSet.
func DescriptorSetProto() (*descriptorpb.FileDescriptorSet, error) {
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(descriptorSet, &fds); err != nil {
		return nil, fmt.Errorf("decoding the embedded descriptor set: %w", err)
	}
	return &fds, nil
}

// MessageName is the full name of m's type ("switchyard.v1.RoutingEvent"),
// the value of the message header.
func MessageName(m proto.Message) string {
	return string(m.ProtoReflect().Descriptor().FullName())
}

// TopLevel are the messages written as whole records (Kafka values or
// JetStream messages): every other message is a part of one of them.
func TopLevel() []protoreflect.MessageDescriptor {
	return []protoreflect.MessageDescriptor{
		(*EngineSignal)(nil).ProtoReflect().Descriptor(),
		(*RoutingEvent)(nil).ProtoReflect().Descriptor(),
		(*Estimate)(nil).ProtoReflect().Descriptor(),
		(*WeightSnapshot)(nil).ProtoReflect().Descriptor(),
	}
}
