// Package aws is the AWS CloudProvider: it launches EC2 machines for NodeClaims from
// EC2NodeClasses and reads them back, through the aws-sdk-go-v2 clients of Clients.
//
// The provider is made of parts, each owning its cache and lock and reaching AWS only through
// the narrow interface it needs of the SDK clients:
//
//   - markets (market.go): the region's instance types, the zones offering each and their
//     on-demand and spot prices, kept for their TTLs, with back-off after failed reads;
//   - builtCache (provider.go, instancetypes.go): each EC2NodeClass's instance types, built from
//     the market and the class's resolved status (capacity, overhead, offerings);
//   - templates (templates.go): the launch templates launches use, created once and collected
//     when unused;
//   - reservationRooms (reservations.go): capacity reservations' room for this cluster;
//   - resolution (nodeclass.go): an EC2NodeClass's subnets, security groups, images, instance
//     profile and capacity reservations, written to its status by the ec2nodeclass controller.
//
// What a launch asks for and what it reads from the answer are pure functions — candidatesFor,
// templateGroups, fleetInput, fleetOutcome; imagesInput and amisFrom for images;
// reservationsInput and reservationStatus for reservations — tested in-process with tables.
// The whole provider is tested through the real SDK clients against the local EC2, SSM,
// Pricing, IAM, SQS and EKS endpoints of test/awsfake.
package aws
