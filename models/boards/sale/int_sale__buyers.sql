{#- Per buyer: spend in cents, units and orders (exact, one copy per event_id). -#}

select
    buyer_id,
    toInt64(sum(amount_cents)) as spend_cents,
    toInt64(sum(units)) as units,
    count() as orders
from {{ ref('stg_toplist__orders') }}
group by buyer_id
