package awsfake_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"capstan.dev/capstan/test/awsfake"
)

// ec2Client is the real SDK's EC2 client on a fresh local endpoint.
func ec2Client(t *testing.T) *ec2.Client {
	t.Helper()
	srv, err := awsfake.New(awsfake.Options{ClusterName: "errors"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return ec2.New(ec2.Options{Region: srv.Region(), BaseEndpoint: aws.String(srv.URL()),
		Credentials: aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDERRORS", SecretAccessKey: "secret"}, nil
		})),
		RetryMaxAttempts: 1})
}

// The local EC2 answers as EC2 does where a lenient fake would answer an empty list: a filter name
// the call does not know is InvalidParameterValue, and an image named by id that it does not have
// is InvalidAMIID.NotFound (a filter on image-id still answers an empty list).
func TestEC2RefusesWhatEC2Refuses(t *testing.T) {
	c := ec2Client(t)
	ctx := context.Background()
	code := func(err error) string {
		var api smithy.APIError
		if errors.As(err, &api) {
			return api.ErrorCode()
		}
		return ""
	}
	_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("instance-colour"), Values: []string{"red"}}}})
	if code(err) != "InvalidParameterValue" {
		t.Errorf("DescribeInstances with an unknown filter: %v, want InvalidParameterValue", err)
	}
	_, err = c.DescribeImages(ctx, &ec2.DescribeImagesInput{Filters: []ec2types.Filter{{Name: aws.String("colour"), Values: []string{"red"}}}})
	if code(err) != "InvalidParameterValue" {
		t.Errorf("DescribeImages with an unknown filter: %v, want InvalidParameterValue", err)
	}
	_, err = c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{"ami-0doesnotexist0001"}})
	if code(err) != "InvalidAMIID.NotFound" {
		t.Errorf("DescribeImages of an unknown id: %v, want InvalidAMIID.NotFound", err)
	}
	out, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{Filters: []ec2types.Filter{{Name: aws.String("image-id"), Values: []string{"ami-0doesnotexist0001"}}}})
	if err != nil || len(out.Images) != 0 {
		t.Errorf("DescribeImages filtered on an unknown id: %v, %v; want none, no error", out, err)
	}
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("tag:team"), Values: []string{"x"}},
		{Name: aws.String("instance-state-name"), Values: []string{"running"}}}}); err != nil {
		t.Errorf("DescribeInstances with tag and state filters: %v", err)
	}
}
