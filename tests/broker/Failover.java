import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * The sends of the harness's failover pair: one message at a time to the master (its slave replicating it), each
 * answer written as soon as it comes, so that the lines say what the producer was told up to the master's kill -9.
 * A line per send: n, topic, keys, tags, uniqKey (the UNIQ_KEY the client gave the message, also when the send
 * failed), status (SEND_OK, FLUSH_DISK_TIMEOUT, ... or EXCEPTION with error), queueId and queueOffset. Ends after
 * {@code sends} sends or 3 failures in a row. The first send is tried again until the route exists (at most 60 s).
 *
 * <pre>
 * java Failover namesrv=H:P out=sent.jsonl seed=7 sends=400 pauseMs=10
 * </pre>
 */
public class Failover {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int i = s.indexOf('=');
            if (i > 0) {
                a.put(s.substring(0, i), s.substring(i + 1));
            }
        }
        Random rnd = new Random(Long.parseLong(a.getOrDefault("seed", "7")));
        int sends = Integer.parseInt(a.getOrDefault("sends", "400"));
        long pauseMs = Long.parseLong(a.getOrDefault("pauseMs", "10"));
        DefaultMQProducer producer = new DefaultMQProducer("failover-producer");
        producer.setNamesrvAddr(a.get("namesrv"));
        producer.setRetryTimesWhenSendFailed(0);
        producer.setSendMsgTimeout(3000);
        producer.start();
        try (PrintWriter out = new PrintWriter(new OutputStreamWriter(new FileOutputStream(a.get("out")), StandardCharsets.UTF_8))) {
            int failures = 0;
            for (int n = 0; n < sends && failures < 3; n++) {
                String topic = n % 3 == 0 ? "FailoverB" : "FailoverA";
                String tags = rnd.nextBoolean() ? "TagA" : "TagB";
                byte[] body = new byte[50 + rnd.nextInt(550)];
                for (int i = 0; i < body.length; i++) {
                    body[i] = (byte) ('a' + rnd.nextInt(26));
                }
                Message m = new Message(topic, tags, "FO-" + n, body);
                Map<String, Object> rec = new LinkedHashMap<>();
                rec.put("n", n);
                rec.put("topic", topic);
                rec.put("keys", "FO-" + n);
                rec.put("tags", tags);
                try {
                    SendResult res = n == 0 ? firstSend(producer, m) : producer.send(m);
                    rec.put("uniqKey", m.getProperty("UNIQ_KEY"));
                    rec.put("status", String.valueOf(res.getSendStatus()));
                    rec.put("queueId", res.getMessageQueue().getQueueId());
                    rec.put("queueOffset", res.getQueueOffset());
                    failures = 0;
                } catch (Exception e) {
                    failures++;
                    rec.put("uniqKey", m.getProperty("UNIQ_KEY"));
                    rec.put("status", "EXCEPTION");
                    rec.put("error", String.valueOf(e).split("\n")[0]);
                }
                out.println(Workload.json(rec));
                out.flush();
                Thread.sleep(pauseMs);
            }
        }
        producer.shutdown();
        System.exit(0);
    }

    /** The first send, tried again (the same message: its UNIQ_KEY stays) until the topic's route exists. */
    static SendResult firstSend(DefaultMQProducer producer, Message m) throws Exception {
        long until = System.currentTimeMillis() + 60_000;
        while (true) {
            try {
                return producer.send(m);
            } catch (Exception e) {
                if (System.currentTimeMillis() > until) {
                    throw e;
                }
                Thread.sleep(500);
            }
        }
    }
}
