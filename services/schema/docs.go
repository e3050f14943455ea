package schema

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Reference renders the enums and messages of the descriptor set, with
// the .proto's comments, as the Markdown reference in docs/schemas.md
// (generated; TestSchemaDocsFresh).
func Reference() (string, error) {
	fds, err := schemas.DescriptorSetProto()
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	for _, f := range fds.GetFile() {
		comments := map[string]string{}
		for _, loc := range f.GetSourceCodeInfo().GetLocation() {
			if c := strings.TrimSpace(loc.GetLeadingComments() + loc.GetTrailingComments()); c != "" {
				comments[pathKey(loc.GetPath())] = c
			}
		}
		sb.WriteString("### Enums\n")
		for i, e := range f.GetEnumType() {
			p := []int32{5, int32(i)} // FileDescriptorProto.enum_type
			fmt.Fprintf(&sb, "\n#### %s\n\n", e.GetName())
			if c := comments[pathKey(p)]; c != "" {
				sb.WriteString(oneParagraph(c) + "\n\n")
			}
			sb.WriteString("| value | number | meaning |\n| --- | --- | --- |\n")
			for j, v := range e.GetValue() {
				fmt.Fprintf(&sb, "| `%s` | %d | %s |\n", v.GetName(), v.GetNumber(), cell(comments[pathKey(append(p, 2, int32(j)))]))
			}
		}
		sb.WriteString("\n### Messages\n")
		for i, m := range f.GetMessageType() {
			writeMessage(&sb, m, []int32{4, int32(i)}, comments) // FileDescriptorProto.message_type
		}
	}
	return sb.String(), nil
}

func writeMessage(sb *strings.Builder, m *descriptorpb.DescriptorProto, p []int32, comments map[string]string) {
	fmt.Fprintf(sb, "\n#### %s\n\n", m.GetName())
	if c := comments[pathKey(p)]; c != "" {
		sb.WriteString(oneParagraph(c) + "\n\n")
	}
	sb.WriteString("| field | number | type | meaning |\n| --- | --- | --- | --- |\n")
	for j, f := range m.GetField() {
		typ := strings.ToLower(strings.TrimPrefix(f.GetType().String(), "TYPE_"))
		if n := f.GetTypeName(); n != "" {
			typ = n[strings.LastIndex(n, ".")+1:]
		}
		if f.GetLabel() == descriptorpb.FieldDescriptorProto_LABEL_REPEATED {
			typ = "repeated " + typ
		}
		if f.OneofIndex != nil {
			typ += " (oneof " + m.GetOneofDecl()[f.GetOneofIndex()].GetName() + ")"
		}
		fmt.Fprintf(sb, "| `%s` | %d | %s | %s |\n", f.GetName(), f.GetNumber(), typ, cell(comments[pathKey(append(p, 2, int32(j)))]))
	}
	if len(m.GetReservedRange()) > 0 || len(m.GetReservedName()) > 0 {
		var rs []string
		for _, r := range m.GetReservedRange() {
			rs = append(rs, fmt.Sprint(r.GetStart()))
		}
		rs = append(rs, m.GetReservedName()...)
		fmt.Fprintf(sb, "\nReserved (removed): %s\n", strings.Join(rs, ", "))
	}
}

func pathKey(p []int32) string { return fmt.Sprint(p) }

func oneParagraph(c string) string {
	lines := strings.Split(c, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, " ")
}

func cell(c string) string {
	return strings.ReplaceAll(oneParagraph(c), "|", `\|`)
}
