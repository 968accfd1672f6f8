// Package requirements is the algebra of node label requirements: the sets of label values a
// NodePool, an instance type, a NodeClaim or a pod allows for each key. It supports Kubernetes'
// node-selector operators (In, NotIn, Exists, DoesNotExist, Gt, Lt) plus Gte and Lte, intersects
// requirement sets, decides whether two sets can be satisfied by one node, and whether a concrete
// label set satisfies them. It is pure and allocation-conscious: the solver calls it in hot loops.
package requirements
