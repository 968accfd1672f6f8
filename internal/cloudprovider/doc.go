// Package cloudprovider defines what Capstan needs from a cloud: instance types with their
// offerings (zone × capacity type × price × availability), and — with the controllers — the
// calls that create, get, list and delete machines.
package cloudprovider
