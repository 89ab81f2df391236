"""The numbers and names several on-disk formats share: record magic codes, flags, property names, Java int
bounds, the CRC32 polynomial. A fact of one file type lives in its module under storelib/formats/ (the ConsumeQueue
unit in consumequeue.py, the IndexFile layout in indexfile.py, ...).

All integers on disk are big-endian (Java ``ByteBuffer`` default).
"""

from __future__ import annotations

# --- CommitLog magic codes (signed int32) ---------------------------------
MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7, v1: 1-byte topic length
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB, v2: 2-byte topic length
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194, end of segment

#: "a record does not fit ... it needs its own length plus 8 spare bytes"
END_FILE_MIN_BLANK_LENGTH = 8

# --- DLedger data files (io.openmessaging.storage.dledger 0.3.x, DLedgerCommitLog) -----------
#: DLedgerEntry.BODY_OFFSET: magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodyLen; then the body
DLEDGER_ENTRY_HEADER = 48
DLEDGER_ENTRY_MAGIC = 1  # DLedgerEntry.MAGIC_1 (CURRENT_MAGIC)
DLEDGER_BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE, then the bytes left in the file
DLEDGER_INDEX_UNIT_SIZE = 32  # DLedgerMmapFileStore.INDEX_UNIT_SIZE: magic 4, pos 8, size 4, index 8, term 8

# --- SYSFLAG bits -----------------------------------------------------------
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20

# --- Properties ---------------------------------------------------------------
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"  # MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"  # a consumer's sent-back (retry, dead-letter) or revived copy
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"  # a sent-back copy: the topic of the message first consumed
PROPERTY_CRC32 = "__CRC32#"  # 5.2+: the record's CRC32 as the last property (enabledAppendPropCRC)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # TimerMessageStore.TIMER_TOPIC

# --- Topic names (TopicValidator) ---------------------------------------------
#: TopicValidator's limit for topics clients create is 127; longer names (v2 records, 5.x
#: LMQ queues) exist in stores, so as a directory name a topic may use NAME_MAX (255 bytes)
TOPIC_MAX_LENGTH = 255
TOPIC_V1_MAX_BYTES = 127  # v1 stores the topic length in one signed byte

# --- Java int ------------------------------------------------------------------------
INT32_MAX = 0x7FFFFFFF  # Integer.MAX_VALUE; also UtilAll.crc32's mask: a CRC32 kept to 31 bits
INT32_MIN = -0x80000000

# --- CRC32 (zlib's, as java.util.zip.CRC32) ---------------------------------------------
#: the CRC-32 polynomial, reflected: bit 31 holds the coefficient of x^0, bit 0 that of x^31
CRC32_POLYNOMIAL = 0xEDB88320

# --- StoreCheckpoint -----------------------------------------------------------------
CHECKPOINT_SIZE = 4096

LMQ_PREFIX = "%LMQ%"  # MixAll.LMQ_PREFIX: a Light Message Queue's topic name
