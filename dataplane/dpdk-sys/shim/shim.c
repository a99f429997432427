/* See shim.h: one-line forwards to DPDK's static inline functions. */
#include "shim.h"

#include <errno.h>
#include <sys/mman.h>

uint16_t lbd_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts, uint16_t nb_pkts)
{ return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts); }
uint16_t lbd_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts, uint16_t nb_pkts)
{ return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts); }

struct rte_mbuf *lbd_rte_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }
int lbd_rte_pktmbuf_alloc_bulk(struct rte_mempool *pool, struct rte_mbuf **mbufs, unsigned count)
{ return rte_pktmbuf_alloc_bulk(pool, mbufs, count); }
void lbd_rte_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
void lbd_rte_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int count) { rte_pktmbuf_free_bulk(mbufs, count); }
char *lbd_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
int lbd_rte_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }
void *lbd_rte_pktmbuf_mtod(const struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }
uint16_t lbd_rte_pktmbuf_data_len(const struct rte_mbuf *m) { return rte_pktmbuf_data_len(m); }
uint32_t lbd_rte_pktmbuf_pkt_len(const struct rte_mbuf *m) { return rte_pktmbuf_pkt_len(m); }
uint16_t lbd_rte_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }
uint16_t lbd_rte_pktmbuf_nb_segs(const struct rte_mbuf *m) { return m->nb_segs; }
uint64_t lbd_rte_pktmbuf_ol_flags(const struct rte_mbuf *m) { return m->ol_flags; }
uint32_t lbd_rte_pktmbuf_rss_hash(const struct rte_mbuf *m) { return m->hash.rss; }
unsigned int lbd_rte_mempool_avail_count(const struct rte_mempool *mp) { return rte_mempool_avail_count(mp); }

unsigned int lbd_rte_ring_enqueue_burst(struct rte_ring *r, void *const *obj_table, unsigned int n)
{ return rte_ring_enqueue_burst(r, obj_table, n, NULL); }
unsigned int lbd_rte_ring_dequeue_burst(struct rte_ring *r, void **obj_table, unsigned int n)
{ return rte_ring_dequeue_burst(r, obj_table, n, NULL); }
unsigned int lbd_rte_ring_count(const struct rte_ring *r) { return rte_ring_count(r); }
unsigned int lbd_rte_ring_free_count(const struct rte_ring *r) { return rte_ring_free_count(r); }

unsigned int lbd_rte_lcore_id(void) { return rte_lcore_id(); }
int lbd_rte_errno(void) { return rte_errno; }

int lbd_madvise_hugepage(void *addr, size_t len)
{
#ifdef MADV_HUGEPAGE
    return madvise(addr, len, MADV_HUGEPAGE);
#else
    errno = EINVAL;
    return -1;
#endif
}
uint64_t lbd_rte_rdtsc(void) { return rte_rdtsc(); }
void lbd_rte_pause(void) { rte_pause(); }

uint64_t lbd_rss_ip_tcp_udp(void) { return RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP; }
uint64_t lbd_rx_offload_ipv4_cksum(void) { return RTE_ETH_RX_OFFLOAD_IPV4_CKSUM; }
uint64_t lbd_tx_offload_ipv4_cksum(void) { return RTE_ETH_TX_OFFLOAD_IPV4_CKSUM; }
