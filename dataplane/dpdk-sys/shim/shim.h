/*
 * C shim for DPDK's `static inline` functions and macros, which bindgen
 * cannot bind. Each function here is a one-line forward with no logic, so
 * the Rust side calls exactly what a C program would have inlined.
 */
#ifndef LBD_DPDK_SHIM_H
#define LBD_DPDK_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>
#include <rte_ring.h>
#include <rte_flow.h>
#include <rte_bus_vdev.h>
#include <rte_dev.h>

uint16_t lbd_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts, uint16_t nb_pkts);
uint16_t lbd_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts, uint16_t nb_pkts);

struct rte_mbuf *lbd_rte_pktmbuf_alloc(struct rte_mempool *mp);
int lbd_rte_pktmbuf_alloc_bulk(struct rte_mempool *pool, struct rte_mbuf **mbufs, unsigned count);
void lbd_rte_pktmbuf_free(struct rte_mbuf *m);
void lbd_rte_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int count);
char *lbd_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
int lbd_rte_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
void *lbd_rte_pktmbuf_mtod(const struct rte_mbuf *m);
uint16_t lbd_rte_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t lbd_rte_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t lbd_rte_pktmbuf_tailroom(const struct rte_mbuf *m);
uint16_t lbd_rte_pktmbuf_nb_segs(const struct rte_mbuf *m);
uint64_t lbd_rte_pktmbuf_ol_flags(const struct rte_mbuf *m);
uint32_t lbd_rte_pktmbuf_rss_hash(const struct rte_mbuf *m);
unsigned int lbd_rte_mempool_avail_count(const struct rte_mempool *mp);

unsigned int lbd_rte_ring_enqueue_burst(struct rte_ring *r, void *const *obj_table, unsigned int n);
unsigned int lbd_rte_ring_dequeue_burst(struct rte_ring *r, void **obj_table, unsigned int n);
unsigned int lbd_rte_ring_count(const struct rte_ring *r);
unsigned int lbd_rte_ring_free_count(const struct rte_ring *r);

unsigned int lbd_rte_lcore_id(void);
int lbd_rte_errno(void);
uint64_t lbd_rte_rdtsc(void);
void lbd_rte_pause(void);

/* madvise(addr, len, MADV_HUGEPAGE): 0, or -1 with errno set (not DPDK's;
 * here because dpdk-sys is the crate that links C). */
int lbd_madvise_hugepage(void *addr, size_t len);

/* Flag values that are macros in DPDK (bindgen skips some of them). */
uint64_t lbd_rss_ip_tcp_udp(void);
uint64_t lbd_rx_offload_ipv4_cksum(void);
uint64_t lbd_tx_offload_ipv4_cksum(void);

#endif
