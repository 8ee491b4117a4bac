package sqs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// policySid names the statement this adapter adds for topicArn.
func policySid(topicArn string) string {
	h := sha256.Sum256([]byte(topicArn))
	return "relay-sns-" + hex.EncodeToString(h[:8])
}

// mergePolicy returns queue policy existing with a statement added that
// lets SNS topic topicArn send to queue queueArn, and whether anything
// changed. Statements already there are kept as they are: a statement
// with our Sid, or any that already allows sns.amazonaws.com to
// sqs:SendMessage from topicArn, means nothing needs adding.
func mergePolicy(existing, queueArn, topicArn string) (string, bool, error) {
	doc := map[string]any{}
	if strings.TrimSpace(existing) != "" {
		if err := json.Unmarshal([]byte(existing), &doc); err != nil {
			return "", false, fmt.Errorf("relay/sqs: the queue's policy is not valid JSON: %w", err)
		}
	}
	var stmts []any
	switch s := doc["Statement"].(type) {
	case nil:
	case []any:
		stmts = s
	case map[string]any:
		stmts = []any{s}
	default:
		return "", false, fmt.Errorf("relay/sqs: the queue's policy has a Statement of type %T", s)
	}
	sid := policySid(topicArn)
	for _, st := range stmts {
		m, ok := st.(map[string]any)
		if !ok {
			continue
		}
		if m["Sid"] == sid || allowsTopic(m, topicArn) {
			return existing, false, nil
		}
	}
	stmts = append(stmts, map[string]any{
		"Sid":       sid,
		"Effect":    "Allow",
		"Principal": map[string]any{"Service": "sns.amazonaws.com"},
		"Action":    "sqs:SendMessage",
		"Resource":  queueArn,
		"Condition": map[string]any{"ArnEquals": map[string]any{"aws:SourceArn": topicArn}},
	})
	doc["Statement"] = stmts
	if _, ok := doc["Version"]; !ok {
		doc["Version"] = "2012-10-17"
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return "", false, err
	}
	return string(out), true, nil
}

// allowsTopic reports whether statement st already lets SNS topic
// topicArn send messages.
func allowsTopic(st map[string]any, topicArn string) bool {
	if st["Effect"] != "Allow" {
		return false
	}
	if !anyMatch(st["Action"], func(s string) bool {
		s = strings.ToLower(s)
		return s == "sqs:sendmessage" || s == "sqs:*" || s == "*"
	}) {
		return false
	}
	principalOK := false
	switch p := st["Principal"].(type) {
	case string:
		principalOK = p == "*"
	case map[string]any:
		principalOK = anyMatch(p["Service"], func(s string) bool { return s == "sns.amazonaws.com" }) ||
			anyMatch(p["AWS"], func(s string) bool { return s == "*" })
	}
	if !principalOK {
		return false
	}
	cond, _ := st["Condition"].(map[string]any)
	for _, op := range []string{"ArnEquals", "ArnLike", "StringEquals", "StringLike"} {
		c, _ := cond[op].(map[string]any)
		for k, v := range c {
			if strings.EqualFold(k, "aws:SourceArn") && anyMatch(v, func(s string) bool { return s == topicArn }) {
				return true
			}
		}
	}
	return false
}

// anyMatch applies f to v, a string or a list of strings.
func anyMatch(v any, f func(string) bool) bool {
	switch v := v.(type) {
	case string:
		return f(v)
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok && f(s) {
				return true
			}
		}
	}
	return false
}
