package testenv

import "testing"

func TestGoawsWritesMaps(t *testing.T) {
	for _, c := range []struct {
		target, body string
		want         bool
	}{
		{"AmazonSQS.CreateQueue", `{"QueueName":"q"}`, true},
		{"AmazonSQS.ReceiveMessage", `{"QueueUrl":"u"}`, false},
		{"", "Action=CreateTopic&Name=t&Version=2010-03-31", true},
		{"", "Action=Subscribe&TopicArn=a", true},
		{"", "Action=Publish&TopicArn=a", false},
		{"", "Action=ListSubscriptionsByTopic", false},
	} {
		if got := goawsWritesMaps(c.target, []byte(c.body)); got != c.want {
			t.Errorf("goawsWritesMaps(%q, %q) = %v, want %v", c.target, c.body, got, c.want)
		}
	}
}
