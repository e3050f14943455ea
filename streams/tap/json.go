package tap

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// AppendJSON appends m as one JSON object: the protobuf JSON mapping
// with the .proto field names, every field present (zero values
// included, as protojson's EmitUnpopulated; an unset oneof is left out),
// enums by name, bytes in base64, NaN and infinities as protojson's
// strings, and 64-bit integers as JSON numbers rather than protojson's
// strings (a number above 2^53 loses precision in JavaScript's
// JSON.parse: affinity_key_hash is one). Fields fields are appended after
// m's own, each a key and a raw JSON value.
func AppendJSON(b []byte, m protoreflect.Message, extra ...Field) []byte {
	b = append(b, '{')
	b = appendFields(b, m)
	for _, f := range extra {
		if b[len(b)-1] != '{' {
			b = append(b, ',')
		}
		b = appendString(b, f.Key)
		b = append(b, ':')
		b = append(b, f.Value...)
	}
	return append(b, '}')
}

// Field is one extra member of an object: a key and its raw JSON value.
type Field struct {
	Key   string
	Value []byte
}

func appendMessage(b []byte, m protoreflect.Message) []byte {
	b = append(b, '{')
	b = appendFields(b, m)
	return append(b, '}')
}

func appendFields(b []byte, m protoreflect.Message) []byte {
	fields := m.Descriptor().Fields()
	first := true
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic() && !m.Has(fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, string(fd.Name()))
		b = append(b, ':')
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			b = append(b, '[')
			for j := 0; j < l.Len(); j++ {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendValue(b, fd, l.Get(j))
			}
			b = append(b, ']')
		case fd.IsMap():
			b = appendMap(b, fd, v.Map())
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			if !m.Has(fd) {
				b = append(b, "null"...)
				continue
			}
			b = appendMessage(b, v.Message())
		default:
			b = appendValue(b, fd, v)
		}
	}
	return b
}

func appendMap(b []byte, fd protoreflect.FieldDescriptor, mp protoreflect.Map) []byte {
	keys := make([]protoreflect.MapKey, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	// Sorted like protojson's deterministic output.
	sortMapKeys(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k.String())
		b = append(b, ':')
		b = appendValue(b, fd.MapValue(), mp.Get(k))
	}
	return append(b, '}')
}

// appendValue appends one singular value of fd's kind.
func appendValue(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(b, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(b, v.Uint(), 10)
	case protoreflect.FloatKind:
		return appendFloat(b, v.Float(), 32)
	case protoreflect.DoubleKind:
		return appendFloat(b, v.Float(), 64)
	case protoreflect.StringKind:
		return appendString(b, v.String())
	case protoreflect.BytesKind:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v.Bytes())
		return append(b, '"')
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendString(b, string(ev.Name()))
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessage(b, v.Message())
	}
	return append(b, "null"...)
}

// appendFloat appends f as encoding/json does, and NaN and the
// infinities as protojson's strings.
func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	// encoding/json's format: 'f' for ordinary magnitudes, 'e' else.
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	return strconv.AppendFloat(b, f, format, -1, bits)
}

func appendString(b []byte, s string) []byte {
	q, err := json.Marshal(s)
	if err != nil { // a string always marshals
		return append(b, `""`...)
	}
	return append(b, q...)
}

// sortMapKeys sorts keys by value: numbers numerically, strings and
// bools by their text.
func sortMapKeys(keys []protoreflect.MapKey) {
	slices.SortFunc(keys, func(a, b protoreflect.MapKey) int {
		switch x := a.Interface().(type) {
		case int32:
			return cmp.Compare(x, b.Interface().(int32))
		case int64:
			return cmp.Compare(x, b.Interface().(int64))
		case uint32:
			return cmp.Compare(x, b.Interface().(uint32))
		case uint64:
			return cmp.Compare(x, b.Interface().(uint64))
		}
		return cmp.Compare(a.String(), b.String())
	})
}
