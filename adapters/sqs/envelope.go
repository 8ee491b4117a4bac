package sqs

import (
	"encoding/base64"
	"encoding/json"
	"strings"
)

// snsEnvelope is the JSON body SNS writes to an SQS queue subscribed
// without raw message delivery.
type snsEnvelope struct {
	Type      string
	MessageID string `json:"MessageId"`
	TopicArn  string
	Message   *string
	// AWS writes {"Type": ..., "Value": ...}; goaws writes the shape of
	// a MessageAttributeValue. Both are read.
	MessageAttributes map[string]struct {
		Type, Value                        string
		DataType, StringValue, BinaryValue string
	}
}

// unwrapSNS returns the delivery inside an SNS notification envelope, and
// whether r was one. A body is taken for an envelope only when it is a
// JSON object with Type "Notification", a MessageId, an SNS TopicArn and a
// Message, and r carries no relay attributes of its own (a relay message
// whose payload merely looks like an envelope is left alone).
func unwrapSNS(r received) (received, bool) {
	if _, ok := r.attrs[AttrID]; ok {
		return r, false
	}
	if _, ok := r.attrs[AttrPacked]; ok {
		return r, false
	}
	body := strings.TrimSpace(r.body)
	if !strings.HasPrefix(body, "{") || !strings.Contains(body, `"Notification"`) {
		return r, false
	}
	var env snsEnvelope
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		return r, false
	}
	if env.Type != "Notification" || env.MessageID == "" || env.Message == nil || !strings.HasPrefix(env.TopicArn, "arn:") {
		return r, false
	}
	out := received{body: *env.Message, msgID: env.MessageID, groupID: r.groupID, attrs: make(map[string]string, len(env.MessageAttributes))}
	for name, a := range env.MessageAttributes {
		typ, v := a.Type, a.Value
		if typ == "" && a.DataType != "" {
			typ, v = a.DataType, a.StringValue
			if strings.HasPrefix(typ, "Binary") {
				v = a.BinaryValue
			}
		}
		if strings.HasPrefix(typ, "Binary") {
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				v = string(b)
			}
		}
		out.attrs[name] = v
	}
	return out, true
}
