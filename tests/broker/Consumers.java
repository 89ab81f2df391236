import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Consumers of the seeded workload's store, with the real client (the harness's "consumers" variant): what
 * production stores hold besides the sends. One source compiles against the 4.9.8 and the 5.x clients (5.x-only
 * methods by reflection).
 *
 * <ul>
 * <li>group wl-retry, TopicOrders, concurrently: a delivery whose queue offset (a retried copy's: its place in
 * %RETRY%wl-retry) is a multiple of 7, or a first delivery whose is a multiple of 5, fails and is sent back (delay
 * level 1); after maxReconsumeTimes 2 the broker puts it to %DLQ%wl-retry. The retried copies keep the original's
 * properties (its LMQ ones too);</li>
 * <li>group wl-orderly, TopicPayments, orderly (queue locks, offsets);</li>
 * <li>pop=true (5.x): group wl-pop, TopicLogs, POP consumption (the broker's assignment, checkpoints and acks in
 * rmq_sys_REVIVE_LOG_*), a message whose queue offset is a multiple of 4 failing its first delivery (revived
 * through %RETRY%).</li>
 * </ul>
 * Each delivery is a line of out (group, topic, queueId, queueOffset, msgId, reconsumeTimes, status). The run ends
 * once nothing was delivered for idleMs (after at least minMs), or after maxMs.
 *
 * <pre>
 * java Consumers namesrv=H:P broker=H:P out=consumed.jsonl pop=true minMs=45000 idleMs=10000 maxMs=120000
 * </pre>
 */
public class Consumers {
    static final AtomicLong LAST = new AtomicLong(System.currentTimeMillis());

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int i = s.indexOf('=');
            if (i > 0) {
                a.put(s.substring(0, i), s.substring(i + 1));
            }
        }
        System.setProperty("rocketmq.client.rebalance.waitInterval", "1000");  // the retry topics' queues soon
        long start = System.currentTimeMillis();
        long minMs = Long.parseLong(a.getOrDefault("minMs", "45000"));
        long idleMs = Long.parseLong(a.getOrDefault("idleMs", "10000"));
        long maxMs = Long.parseLong(a.getOrDefault("maxMs", "120000"));
        try (PrintWriter out = new PrintWriter(new OutputStreamWriter(new FileOutputStream(a.get("out")), StandardCharsets.UTF_8))) {
            DefaultMQPushConsumer retry = consumer(a, "wl-retry", "TopicOrders");
            retry.setMaxReconsumeTimes(2);
            retry.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                ctx.setDelayLevelWhenNextConsume(1);
                boolean ok = record(out, "wl-retry", msgs, m -> m.getQueueOffset() % 7 != 0 && (m.getQueueOffset() % 5 != 0 || m.getReconsumeTimes() > 0));
                return ok ? ConsumeConcurrentlyStatus.CONSUME_SUCCESS : ConsumeConcurrentlyStatus.RECONSUME_LATER;
            });
            DefaultMQPushConsumer orderly = consumer(a, "wl-orderly", "TopicPayments");
            orderly.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                record(out, "wl-orderly", msgs, m -> true);
                return ConsumeOrderlyStatus.SUCCESS;
            });
            DefaultMQPushConsumer pop = null;
            if (Boolean.parseBoolean(a.getOrDefault("pop", "false"))) {
                pop = consumer(a, "wl-pop", "TopicLogs");
                DefaultMQPushConsumer.class.getMethod("setClientRebalance", boolean.class).invoke(pop, false);
                pop.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    boolean ok = record(out, "wl-pop", msgs, m -> m.getQueueOffset() % 4 != 0 || m.getReconsumeTimes() > 0);
                    return ok ? ConsumeConcurrentlyStatus.CONSUME_SUCCESS : ConsumeConcurrentlyStatus.RECONSUME_LATER;
                });
            }
            retry.start();
            orderly.start();
            if (pop != null) {
                popMode(retry, a.get("broker"), "TopicLogs", "wl-pop");
                pop.start();
            }
            while (true) {
                long now = System.currentTimeMillis();
                if (now - start > maxMs || (now - start > minMs && now - LAST.get() > idleMs)) {
                    break;
                }
                Thread.sleep(200);
            }
            for (DefaultMQPushConsumer c : new DefaultMQPushConsumer[] {retry, orderly, pop}) {
                if (c != null) {
                    c.shutdown();
                }
            }
        }
        System.exit(0);
    }

    static DefaultMQPushConsumer consumer(Map<String, String> a, String group, String topic) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(a.get("namesrv"));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setInstanceName(group);
        c.setPollNameServerInterval(1000);  // the route of a retry topic the broker has just made
        c.subscribe(topic, "*");
        return c;
    }

    /** The broker assigns the group's queues of the topic and serves them by POP (5.x MQClientAPIImpl.setMessageRequestMode). */
    static void popMode(DefaultMQPushConsumer started, String broker, String topic, String group) throws Exception {
        MQClientAPIImpl api = started.getDefaultMQPushConsumerImpl().getmQClientFactory().getMQClientAPIImpl();
        for (Method m : MQClientAPIImpl.class.getMethods()) {
            if (m.getName().equals("setMessageRequestMode")) {
                Class<?> mode = m.getParameterTypes()[3];
                Object pop = mode.getMethod("valueOf", String.class).invoke(null, "POP");
                m.invoke(api, broker, topic, group, pop, 0, 5000L);
                return;
            }
        }
        throw new IllegalStateException("this client has no setMessageRequestMode");
    }

    interface Accept {
        boolean test(MessageExt m);
    }

    /** One line per delivery; whether every message of the batch was accepted. */
    static synchronized boolean record(PrintWriter out, String group, List<MessageExt> msgs, Accept accept) {
        boolean all = true;
        for (MessageExt m : msgs) {
            boolean ok = accept.test(m);
            all &= ok;
            Map<String, Object> rec = new LinkedHashMap<>();
            rec.put("group", group);
            rec.put("topic", m.getTopic());
            rec.put("queueId", m.getQueueId());
            rec.put("queueOffset", m.getQueueOffset());
            rec.put("msgId", m.getMsgId());
            rec.put("reconsumeTimes", m.getReconsumeTimes());
            rec.put("status", ok ? "CONSUMED" : "FAILED");
            StringBuilder sb = new StringBuilder("{");
            for (Map.Entry<String, Object> e : rec.entrySet()) {
                if (sb.length() > 1) {
                    sb.append(',');
                }
                sb.append('"').append(e.getKey()).append("\":");
                Object v = e.getValue();
                sb.append(v instanceof String ? "\"" + v + "\"" : String.valueOf(v));
            }
            out.println(sb.append('}'));
        }
        out.flush();
        LAST.set(System.currentTimeMillis());
        return all;
    }
}
