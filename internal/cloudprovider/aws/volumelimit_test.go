package aws_test

import (
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"
)

// The EBS volumes a new machine takes: a dedicated limit less the class's block devices; a shared
// one less the primary network interface and the instance-store volumes too; none without a limit.
func TestEBSVolumeLimit(t *testing.T) {
	class := func(devices int) *awsv1.EC2NodeClass {
		nc := &awsv1.EC2NodeClass{}
		nc.Spec.BlockDeviceMappings = make([]awsv1.BlockDeviceMapping, devices)
		return nc
	}
	ebs := func(kind ec2types.AttachmentLimitType, n int32) *ec2types.EbsInfo {
		return &ec2types.EbsInfo{AttachmentLimitType: kind, MaximumEbsAttachments: awssdk.Int32(n)}
	}
	disks := &ec2types.InstanceStorageInfo{Disks: []ec2types.DiskInfo{{Count: awssdk.Int32(2)}, {Count: awssdk.Int32(1)}}}
	for _, c := range []struct {
		name  string
		info  ec2types.InstanceTypeInfo
		class *awsv1.EC2NodeClass
		want  int64
		ok    bool
	}{
		{"dedicated, root only", ec2types.InstanceTypeInfo{EbsInfo: ebs(ec2types.AttachmentLimitTypeDedicated, 32)}, class(0), 31, true},
		{"dedicated, two block devices", ec2types.InstanceTypeInfo{EbsInfo: ebs(ec2types.AttachmentLimitTypeDedicated, 32)}, class(2), 30, true},
		{"shared", ec2types.InstanceTypeInfo{EbsInfo: ebs(ec2types.AttachmentLimitTypeShared, 28)}, class(1), 26, true},
		{"shared with three instance-store disks", ec2types.InstanceTypeInfo{EbsInfo: ebs(ec2types.AttachmentLimitTypeShared, 28), InstanceStorageInfo: disks}, class(1), 23, true},
		{"never negative", ec2types.InstanceTypeInfo{EbsInfo: ebs(ec2types.AttachmentLimitTypeShared, 2), InstanceStorageInfo: disks}, class(1), 0, true},
		{"no limit reported", ec2types.InstanceTypeInfo{EbsInfo: &ec2types.EbsInfo{}}, class(1), 0, false},
		{"no EBS info", ec2types.InstanceTypeInfo{}, class(1), 0, false},
	} {
		if got, ok := aws.EBSVolumeLimit(c.info, c.class); got != c.want || ok != c.ok {
			t.Errorf("%s: %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
