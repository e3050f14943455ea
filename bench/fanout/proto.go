package main

import (
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

func protoMarshal(s *schemas.WeightSnapshot) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(s)
}
