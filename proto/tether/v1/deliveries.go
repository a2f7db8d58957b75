package tetherv1

// DeliveriesOf is what m carries to the handler: its one Delivery, the
// deliveries of its DeliveryBatch in order, or none.
func DeliveriesOf(m *ConnectResponse) []*Delivery {
	if d := m.GetDelivery(); d != nil {
		return []*Delivery{d}
	}
	return m.GetDeliveryBatch().GetDeliveries()
}
