package aws_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/test/awsfake/awstest"
)

// Without --aws-endpoint-url the SDK's own endpoint settings stand: AWS_ENDPOINT_URL for every
// service, AWS_ENDPOINT_URL_<SERVICE> for one (the plugin and a user's shell rely on them).
func TestTheSDKsEndpointVariablesAreHonoured(t *testing.T) {
	f := awstest.New(t, env.Client)
	f.AWS.CreateQueue("env-queue", "", 0)
	creds := config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(awstest.AccessKey, "secret", ""))
	for _, tc := range []struct{ name, variable string }{
		{"every service", "AWS_ENDPOINT_URL"},
		{"per service", "AWS_ENDPOINT_URL_EC2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.variable, f.AWS.URL())
			if tc.variable != "AWS_ENDPOINT_URL" {
				t.Setenv("AWS_ENDPOINT_URL_SQS", f.AWS.URL())
			}
			c, err := aws.NewClients(context.Background(), aws.ClientOptions{Region: f.AWS.Region(), MaxAttempts: 1,
				ConfigOptions: []func(*config.LoadOptions) error{creds}})
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.EC2.DescribeInstanceTypes(context.Background(), &ec2.DescribeInstanceTypesInput{})
			if err != nil || len(out.InstanceTypes) == 0 {
				t.Fatalf("EC2 through %s: %v", tc.variable, err)
			}
			if _, err := c.SQS.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: new("env-queue")}); err != nil {
				t.Fatalf("SQS: %v", err)
			}
		})
	}
}
